// A throwaway PostgreSQL for tests: a cluster of its own (initdb into a
// temporary folder), its server listening only on a Unix socket in that
// folder. CI runs as root, which PostgreSQL refuses, so under root the
// cluster belongs to an unprivileged user (postgres, else nobody).
//
// The cluster is stopped and its folder removed when the object goes, and
// also when the test process dies any other way (a crash, SIGKILL): a
// guardian process holds the cluster and stops it when the test's end of
// a pipe closes.
//
// The server's programs are found in $KTUNE_PG_BINDIR, else the newest
// /usr/lib/postgresql/N/bin (Debian's postgresql package), else PATH.
#ifndef KTUNE_TESTS_TESTING_POSTGRES_H_
#define KTUNE_TESTS_TESTING_POSTGRES_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ktune::testing {

class PostgresCluster {
 public:
  struct Options {
    // Durable commits (fsync, synchronous_commit) as a production server
    // has them; off, the tests run faster and lose nothing they check.
    bool durable = false;
  };
  static absl::StatusOr<std::unique_ptr<PostgresCluster>> Start(Options options);
  static absl::StatusOr<std::unique_ptr<PostgresCluster>> Start() { return Start(Options()); }
  ~PostgresCluster();
  PostgresCluster(const PostgresCluster&) = delete;
  PostgresCluster& operator=(const PostgresCluster&) = delete;

  // Creates the database `name` (letters, digits, _) and returns its URI.
  absl::StatusOr<std::string> CreateDatabase(const std::string& name);
  // postgresql:///DATABASE?host=SOCKET_DIR&user=ktune
  std::string Uri(const std::string& database) const;

  // Stops the server (fast shutdown) and starts it again, keeping the data:
  // for tests of an unreachable database.
  absl::Status StopServer();
  absl::Status StartServer();

  const std::string& dir() const { return dir_; }

 private:
  PostgresCluster() = default;
  // Runs the server program `program` with `args`, as the cluster's user.
  absl::Status RunTool(const std::string& program, const std::vector<std::string>& args) const;

  std::string bindir_;
  std::string dir_;  // the folder: data/, the socket, log
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  bool durable_ = false;
  int guardian_pipe_ = -1;  // closing it stops the cluster
  pid_t guardian_ = -1;
};

// One cluster for the whole test process, started on first use; a test
// that cannot have one fails, naming why (CI installs the postgresql
// package; see scripts/setup.sh).
absl::StatusOr<PostgresCluster*> SharedPostgres();

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_POSTGRES_H_
