#include "tests/testing/postgres.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "tuner/base/strings.h"
#include "tuner/store/pg.h"

namespace ktune::testing {
namespace {

// The folder holding initdb and pg_ctl.
absl::StatusOr<std::string> FindBindir() {
  if (const char* b = std::getenv("KTUNE_PG_BINDIR"); b != nullptr && *b != '\0') return b;
  std::vector<std::filesystem::path> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
    if (std::filesystem::exists(e.path() / "bin" / "initdb")) found.push_back(e.path() / "bin");
  }
  if (!found.empty()) {
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
      return std::stoi(a.parent_path().filename().string()) <
             std::stoi(b.parent_path().filename().string());
    });
    return found.back().string();
  }
  const char* path = std::getenv("PATH");
  for (const std::string& d : StrSplit(path != nullptr ? path : "", ':')) {
    if (!d.empty() && access((d + "/initdb").c_str(), X_OK) == 0) return d;
  }
  return absl::NotFoundError(
      "no PostgreSQL server programs (initdb, pg_ctl): install Debian's postgresql package "
      "(scripts/setup.sh does), or set KTUNE_PG_BINDIR");
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

absl::Status PostgresCluster::RunTool(const std::string& program,
                                      const std::vector<std::string>& args) const {
  const std::string log = dir_ + "/tools.log";
  const std::string exe = bindir_ + "/" + program;
  std::vector<std::string> argv_s = {exe};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(argv_s.size() + 1);
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    if (getuid() != uid_) {
      if (setgroups(0, nullptr) != 0 || setgid(gid_) != 0 || setuid(uid_) != 0) _exit(126);
    }
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  std::string tail = Slurp(log);
  if (tail.size() > 2000) tail = tail.substr(tail.size() - 2000);
  return absl::InternalError(StrCat(program, " failed (status ", status, "): ", tail));
}

absl::StatusOr<std::unique_ptr<PostgresCluster>> PostgresCluster::Start(Options options) {
  absl::StatusOr<std::string> bindir = FindBindir();
  if (!bindir.ok()) return bindir.status();
  std::unique_ptr<PostgresCluster> c(new PostgresCluster());
  c->bindir_ = *bindir;
  c->durable_ = options.durable;
  char tmpl[] = "/tmp/ktune-pg-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  c->dir_ = tmpl;
  c->uid_ = getuid();
  c->gid_ = getgid();
  if (c->uid_ == 0) {
    // PostgreSQL refuses to run as root.
    const passwd* pw = getpwnam("postgres");
    if (pw == nullptr) pw = getpwnam("nobody");
    if (pw == nullptr) return absl::NotFoundError("no unprivileged user (postgres, nobody)");
    c->uid_ = pw->pw_uid;
    c->gid_ = pw->pw_gid;
    if (chown(c->dir_.c_str(), c->uid_, c->gid_) != 0) {
      return absl::InternalError(StrCat("chown ", c->dir_, " failed"));
    }
  }
  // The guardian: stops the cluster and removes its folder once the pipe's
  // write end (held by this process only) closes, however it closes.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  const std::string data = c->dir_ + "/data";
  std::string stop = StrCat("'", c->bindir_, "/pg_ctl' -D '", data, "' -m immediate -w stop");
  if (c->uid_ != getuid()) {
    stop = StrCat("setpriv --reuid=", c->uid_, " --regid=", c->gid_, " --clear-groups ", stop);
  }
  const std::string script = StrCat("cat >/dev/null; if [ -f '", data, "/postmaster.pid' ]; then ",
                                    stop, " >/dev/null 2>&1; fi; rm -rf '", c->dir_, "'");
  const pid_t guardian = fork();
  if (guardian < 0) return absl::InternalError("fork failed");
  if (guardian == 0) {
    setsid();
    dup2(fds[0], 0);
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
      dup2(null, 1);
      dup2(null, 2);
    }
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[0]);
  c->guardian_pipe_ = fds[1];
  c->guardian_ = guardian;

  if (absl::Status s = c->RunTool(
          "initdb", {"-D", data, "-U", "ktune", "-A", "trust", "-E", "UTF8", "--locale=C", "-N"});
      !s.ok()) {
    return s;
  }
  std::ofstream conf(data + "/postgresql.conf", std::ios::app);
  conf << "listen_addresses = ''\n"
       << "unix_socket_directories = '" << c->dir_ << "'\n"
       << "max_connections = 200\n";
  if (!options.durable) {
    conf << "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n";
  }
  conf.close();
  if (!conf) return absl::InternalError("cannot write postgresql.conf");
  if (absl::Status s = c->StartServer(); !s.ok()) return s;
  return c;
}

absl::Status PostgresCluster::StartServer() {
  return RunTool("pg_ctl",
                 {"-D", dir_ + "/data", "-l", dir_ + "/server.log", "-w", "-t", "60", "start"});
}

absl::Status PostgresCluster::StopServer() {
  return RunTool("pg_ctl", {"-D", dir_ + "/data", "-m", "fast", "-w", "stop"});
}

PostgresCluster::~PostgresCluster() {
  if (guardian_pipe_ >= 0) close(guardian_pipe_);
  if (guardian_ > 0) {
    int status = 0;
    waitpid(guardian_, &status, 0);
  }
}

std::string PostgresCluster::Uri(const std::string& database) const {
  return StrCat("postgresql:///", database, "?host=", dir_, "&user=ktune");
}

absl::StatusOr<std::string> PostgresCluster::CreateDatabase(const std::string& name) {
  absl::StatusOr<pg::Conn> admin = pg::Conn::Connect(Uri("postgres"));
  if (!admin.ok()) return admin.status();
  if (absl::Status s = admin->Run(StrCat("CREATE DATABASE ", name)); !s.ok()) return s;
  return Uri(name);
}

absl::StatusOr<PostgresCluster*> SharedPostgres() {
  static std::mutex mu;
  static std::unique_ptr<PostgresCluster> shared;
  static absl::Status failed;
  std::lock_guard<std::mutex> lock(mu);
  if (shared == nullptr && failed.ok()) {
    absl::StatusOr<std::unique_ptr<PostgresCluster>> c = PostgresCluster::Start();
    if (c.ok()) {
      shared = *std::move(c);
    } else {
      failed = c.status();
    }
  }
  if (!failed.ok()) return failed;
  return shared.get();
}

}  // namespace ktune::testing
