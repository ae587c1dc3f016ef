// A store file given to `ktune merge` as a source: any bytes, written to a
// file, prepared (copied, checked, migrated) and merged into a store, which
// must then still read back whole.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "tuner/store/merge.h"
#include "tuner/store/store.h"

namespace {

// One folder per fuzzing process, removed at its exit (kept in a plain
// array: strings are destroyed before the exit handler runs).
char folder[] = "/tmp/ktune_fuzz_merge_XXXXXX";

std::string Folder() {
  static const bool made = [] {
    if (mkdtemp(folder) == nullptr) std::abort();
    std::atexit([] {
      char command[64];
      std::snprintf(command, sizeof command, "rm -rf %s", folder);
      (void)std::system(command);
    });
    return true;
  }();
  (void)made;
  return folder;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ktune;
  const std::string source = Folder() + "/source.db";
  const std::string target = Folder() + "/target.db";
  {
    std::ofstream f(source, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  std::remove(target.c_str());
  absl::StatusOr<MergeSource> prepared = MergeSource::Prepare(source);
  if (prepared.ok()) {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(target, /*create=*/true);
    if (!store.ok()) std::abort();  // a fresh store always opens
    (void)(*store)->Merge(*prepared);
    // What was merged reads back: every job and its measurements.
    absl::StatusOr<std::vector<JobRecord>> jobs = (*store)->ListJobs();
    if (!jobs.ok()) std::abort();
    for (const JobRecord& j : *jobs) {
      if (!(*store)->LoadMeasurements(j.id).ok()) std::abort();
    }
  }
  std::remove(source.c_str());
  return 0;
}
