// The store contract: what every Store backend does, as a test suite over
// a backend parameter. A backend passes it by instantiating the suite:
//
//   INSTANTIATE_TEST_SUITE_P(Sqlite, StoreContractTest,
//                            ::testing::Values(StoreBackend{"sqlite", ...}));
//
// and must pass it unchanged.
#ifndef KTUNE_TESTS_STORE_STORE_CONTRACT_H_
#define KTUNE_TESTS_STORE_STORE_CONTRACT_H_

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "tests/testing/temp_dir.h"
#include "tuner/store/store.h"

namespace ktune {

// A store backend under test.
struct StoreBackend {
  std::string name;
  // The locator of a fresh, empty store called `name`, for a test whose
  // temporary folder is `dir` (Store::Open with create makes it).
  std::function<std::string(const testing::TempDir& dir, const std::string& name)> locator;
};

inline void PrintTo(const StoreBackend& backend, std::ostream* os) { *os << backend.name; }

class StoreContractTest : public ::testing::TestWithParam<StoreBackend> {
 protected:
  // The test's store (`name` "main" unless another is asked).
  std::string Locator(const std::string& name = "main") const {
    return GetParam().locator(tmp_, name);
  }
  std::unique_ptr<Store> Open(bool create = true, const std::string& name = "main") const;

  static JobRecord MakeJob(const std::string& id, const std::string& device_uuid = "GPU-1");
  static StoredMeasurement Ok(std::int64_t seq, const std::string& key, double ms);

  testing::TempDir tmp_;
};

}  // namespace ktune

#endif  // KTUNE_TESTS_STORE_STORE_CONTRACT_H_
