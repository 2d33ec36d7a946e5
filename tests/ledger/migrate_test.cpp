// Released migrations are immutable: each version's text is pinned here by
// its checksum. A failure means a released migration was edited — write a
// new migration instead (and never change this list for an old version).
#include "idemledger/ledger/migrate.hpp"

#include <map>

#include "gmock/gmock.h"

namespace idemledger {
namespace {

TEST(MigrationCatalog, ReleasedMigrationsNeverChange) {
  const std::map<int, std::string> pinned = {
      // version -> SHA-256 over the statements, length-prefixed
      {1, "63b29a4be05589e6a14106d6da7cea20540704f4ab52d9c5d1f40f5c00b13f6d"},
      {2, "fa86f06a76037c7f06cea710e01d34a53af74df06244125011a3cb0c042034a2"},
      {3, "36d9a2720f82a97dfb2db9c72199334afe4d3376fa7fec7e3805889faffb3ef4"},
      {4, "273585cac085a5847b0274699ecce4bf938e41db37f0db0087e2d5e9d38c17fb"},
      {5, "45b217d161cc1d4cca7f4f52dc00479ae745968a31e43cf98bcdb506a5f906d4"},
      {6, "7519688b2f6a7dc37530cbf9273dd21c18983541da089c8ac07fd4b8ff9b0a7b"},
      {7, "73e1a70e476c99807ebc07644f36894ac9aa759983f648faccf5e2ca5a44f1ae"},
      {8, "2e4312589903124ad192343ae26f50b59ea4190f7731cf9db7eb5ad73b27d0e5"},
      {9, "8df8ef45d05357d83f91f29a4befbb9aebb890548d9166da07035f3bc7cc251e"},
      {10, "fc1e66f7d4bb00d8133df9e34eaceaa593bac470251927c437e6fa86587c5b7c"},
      {11, "1a43e664c0ecfc2f78348c86f2f1670c97a6d6976babd5c88850b8a121dcd53b"},
      {12, "2f8b246cfc03b284caa16ea43ef92382438191383d041487a228a9c128bf928e"},
      {13, "6cf665725e40478a0182c599a192b456dc2ae15141a16d5c67f3177776c10d12"},
      {14, "f809c2046f67466c22db58f7310f79fb781804b621f8b0bfde2cbae646b338eb"},
      {15, "5b9d6a356bebce5743452ef484292018525b13a51dbe3b25d69367a799b66d1e"},
      {16, "97f591aaa99948b32df60871a486a59284b5b3d04ea8a4dae9e9f2811031e7a7"},
      {17, "387f2495b83cd4525856c1e7a45d3b83719ebb091755df7ef955a567cf616bc4"},
      {18, "4a9cad6f7a852363d44d0adacb09457b0a42f6d3a5ee299fb0b96b5f32294825"},
      {19, "05ce1a6b83e2b1e1851ae64b0b960894e21dc8c538acf4345eecfc231c80f10c"},
      {20, "5ff7c5add2239d927f468b3d7e7b5084fb9f445c3bb91b35f387eaee14d26cd4"},
      {21, "6e418c0b9d5dcff5beb7a8861fb7acc022b98141d32cb8f9cd86229a4340bdaa"},
      {22, "7cdd2b4297df3c8693d5471fc99fdb32af39296dcd538cff9ad67cd65a152c80"},
      {23, "d9cf40582c7502babc7b0cab2d1914a04aebdc2b3e8bcc871dd3173fa75c9f1c"},
  };
  const std::vector<MigrationInfo> catalog = migration_catalog();
  ASSERT_GE(catalog.size(), pinned.size());
  for (const MigrationInfo& m : catalog) {
    const auto it = pinned.find(m.version);
    if (it == pinned.end()) {
      ADD_FAILURE() << "migration " << m.version << " (" << m.name
                    << ") is new: pin it here with checksum " << m.checksum;
      continue;
    }
    EXPECT_EQ(m.checksum, it->second)
        << "migration " << m.version << " (" << m.name
        << ") was edited after its release; add a new migration instead";
  }
}

TEST(MigrationCatalog, VersionsAreDenseAndNamed) {
  const std::vector<MigrationInfo> catalog = migration_catalog();
  for (std::size_t i = 0; i < catalog.size(); ++i) {
    EXPECT_EQ(catalog[i].version, static_cast<int>(i + 1));
    EXPECT_FALSE(catalog[i].name.empty());
  }
  EXPECT_EQ(latest_schema_version(), static_cast<int>(catalog.size()));
}

}  // namespace
}  // namespace idemledger
