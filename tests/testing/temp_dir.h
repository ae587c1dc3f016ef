// A temporary folder for a test, removed with everything in it at the end.
#ifndef KTUNE_TESTS_TESTING_TEMP_DIR_H_
#define KTUNE_TESTS_TESTING_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace ktune::testing {

// Creates a fresh folder under /tmp; the destructor removes it. Move-only.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ktune_test_XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir& operator=(TempDir&&) = delete;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // The path of `name` inside the folder.
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_TEMP_DIR_H_
