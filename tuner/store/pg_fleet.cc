// The PostgreSQL store's fleet queue (store/fleet.h).
#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/store/codecs.h"
#include "tuner/store/fleet.h"
#include "tuner/store/pg_store.h"

namespace ktune {
namespace {

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()); }

}  // namespace

std::string FleetModelOf(const DeviceInfo& device) {
  if (device.simulated) return StrCat("recording ", device.uuid);
  return StrCat(device.name, " (", device.architecture, ")");
}

absl::StatusOr<FleetBeat> PgStore::Heartbeat(const std::string& daemon,
                                             const std::vector<FleetDevice>& devices,
                                             const std::vector<std::string>& running,
                                             std::chrono::milliseconds lease) {
  return Retrying([&] { return HeartbeatOnce(daemon, devices, running, lease); });
}

absl::StatusOr<FleetBeat> PgStore::HeartbeatOnce(const std::string& daemon,
                                                 const std::vector<FleetDevice>& devices,
                                                 const std::vector<std::string>& running,
                                                 std::chrono::milliseconds lease) {
  KTUNE_ASSIGN_OR_RETURN(pg::Transaction tx, pg::Transaction::Begin(conn_));
  KTUNE_ASSIGN_OR_RETURN(pg::Result fresh, conn_.Exec(R"sql(
INSERT INTO ktune.daemons (name, seen_at) VALUES ($1, now())
ON CONFLICT (name) DO UPDATE SET seen_at = now()
RETURNING (xmax = 0))sql",
                                                      pg::Params().Add(daemon)));
  if (fresh.rows() == 1 && fresh.Text(0, 0) == "t") {
    for (const FleetDevice& d : devices) {
      KTUNE_RETURN_IF_ERROR(conn_.Run(
          R"sql(
INSERT INTO ktune.daemon_devices (daemon, model, name, uuid, locator)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING)sql",
          pg::Params().Add(daemon).Add(d.model).Add(d.info.name).Add(d.info.uuid).Add(d.locator)));
    }
  }
  // Only the jobs it runs: a job left running in its name but not run
  // (planning it failed half-way, say) lapses and is claimed again.
  KTUNE_RETURN_IF_ERROR(
      conn_.Run(R"sql(
UPDATE ktune.jobs SET lease_until = now() + $2 * interval '1 millisecond'
WHERE runner = $1 AND state = 'running' AND id = ANY($3::text[]))sql",
                pg::Params().Add(daemon).Add(Ms(lease)).Add(pg::ArrayLiteral(running))));
  FleetBeat beat;
  KTUNE_ASSIGN_OR_RETURN(pg::Result asked, conn_.Exec(R"sql(
SELECT id FROM ktune.jobs WHERE runner = $1 AND state = 'running' AND cancel_asked ORDER BY id)sql",
                                                      pg::Params().Add(daemon)));
  for (int i = 0; i < asked.rows(); ++i) beat.cancel.push_back(asked.Text(i, 0));
  if (!running.empty()) {
    KTUNE_ASSIGN_OR_RETURN(pg::Result lost,
                           conn_.Exec(R"sql(
SELECT id FROM ktune.jobs
WHERE id = ANY($2::text[]) AND (runner <> $1 OR state <> 'running') ORDER BY id)sql",
                                      pg::Params().Add(daemon).Add(pg::ArrayLiteral(running))));
    for (int i = 0; i < lost.rows(); ++i) beat.lost.push_back(lost.Text(i, 0));
  }
  KTUNE_RETURN_IF_ERROR(tx.Commit());
  return beat;
}

absl::Status PgStore::Leave(const std::string& daemon) {
  return conn_.Run("DELETE FROM ktune.daemons WHERE name = $1", pg::Params().Add(daemon));
}

absl::StatusOr<std::string> PgStore::ResolveModel(const std::string& wanted,
                                                  std::chrono::milliseconds alive) {
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(R"sql(
SELECT dd.model FROM ktune.daemon_devices dd JOIN ktune.daemons d ON d.name = dd.daemon
WHERE d.seen_at > now() - $2 * interval '1 millisecond'
  AND (dd.model = $1 OR dd.name = $1 OR dd.uuid = $1 OR dd.locator = $1)
ORDER BY dd.model LIMIT 1)sql",
                                                  pg::Params().Add(wanted).Add(Ms(alive))));
  if (r.rows() == 0) {
    return absl::NotFoundError(
        StrCat("'", wanted, "' is not served by any live daemon of the fleet (", name_, ")"));
  }
  return r.Text(0, 0);
}

absl::StatusOr<std::int64_t> PgStore::Waiting() {
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(R"sql(
SELECT count(*) FROM ktune.jobs WHERE model <> '' AND state IN ('queued', 'interrupted'))sql"));
  return r.Int(0, 0);
}

absl::StatusOr<std::int64_t> PgStore::Unfinished(const std::string& client) {
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(R"sql(
SELECT count(*) FROM ktune.jobs
WHERE client = $1 AND model <> '' AND state IN ('queued', 'running', 'interrupted'))sql",
                                                  pg::Params().Add(client)));
  return r.Int(0, 0);
}

absl::Status PgStore::Offer(const std::string& job_id, const std::string& model) {
  KTUNE_ASSIGN_OR_RETURN(
      pg::Result r,
      conn_.Exec("UPDATE ktune.jobs SET model = $2, cancel_asked = false WHERE id = $1",
                 pg::Params().Add(job_id).Add(model)));
  if (r.Changed() == 0) return absl::NotFoundError(StrCat("no job ", job_id));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<JobRecord>> PgStore::Claim(const std::string& daemon,
                                                        const std::vector<std::string>& models,
                                                        std::chrono::milliseconds lease) {
  if (models.empty()) return std::optional<JobRecord>();
  // A job whose daemon died (its lease lapsed) first, then the queue: two
  // statements, each on its own index, so claimed jobs never slow the next
  // claim.
  pg::Result r;
  for (const char* which :
       {"state = 'running' AND lease_until < now()", "state IN ('queued', 'interrupted')"}) {
    // Each model's first job through its index, then the first of those.
    KTUNE_ASSIGN_OR_RETURN(r, conn_.Exec(StrCat(R"sql(
WITH next AS (
  SELECT c.id FROM unnest($2::text[]) AS m(model)
  CROSS JOIN LATERAL (
    SELECT id, priority, created_at FROM ktune.jobs
    WHERE model <> '' AND model = m.model AND NOT cancel_asked AND )sql",
                                                which, R"sql(
    ORDER BY priority DESC, created_at, id
    LIMIT 1 FOR UPDATE SKIP LOCKED) c
  ORDER BY c.priority DESC, c.created_at, c.id LIMIT 1)
UPDATE ktune.jobs j SET state = 'running', runner = $1, message = '', updated_at = $4,
  lease_until = now() + $3 * interval '1 millisecond'
FROM next WHERE j.id = next.id
RETURNING j.id)sql"),
                                         pg::Params()
                                             .Add(daemon)
                                             .Add(pg::ArrayLiteral(models))
                                             .Add(Ms(lease))
                                             .Add(NowIso8601())));
    if (r.rows() > 0) break;
  }
  if (r.rows() == 0) return std::optional<JobRecord>();
  KTUNE_ASSIGN_OR_RETURN(JobRecord job, GetJob(r.Text(0, 0)));
  return std::optional<JobRecord>(std::move(job));
}

absl::StatusOr<bool> PgStore::RequestCancel(const std::string& job_id) {
  KTUNE_ASSIGN_OR_RETURN(pg::Result now, conn_.Exec(R"sql(
UPDATE ktune.jobs SET state = 'cancelled', message = 'cancelled by a client', updated_at = $2
WHERE id = $1 AND state IN ('queued', 'interrupted') RETURNING id)sql",
                                                    pg::Params().Add(job_id).Add(NowIso8601())));
  if (now.rows() > 0) return true;
  KTUNE_ASSIGN_OR_RETURN(pg::Result later, conn_.Exec(R"sql(
UPDATE ktune.jobs SET cancel_asked = true WHERE id = $1 AND state = 'running' RETURNING id)sql",
                                                      pg::Params().Add(job_id)));
  if (later.rows() > 0) return false;
  KTUNE_ASSIGN_OR_RETURN(JobRecord job, GetJob(job_id));
  return absl::FailedPreconditionError(
      StrCat("job ", job_id, " already ended: ", JobStateName(job.state)));
}

absl::StatusOr<std::int64_t> PgStore::Hand(const std::string& spec, int priority,
                                           const std::string& model, const std::string& client) {
  KTUNE_ASSIGN_OR_RETURN(
      pg::Result r, conn_.Exec(R"sql(
INSERT INTO ktune.submissions (spec, priority, model, client) VALUES ($1, $2, $3, $4)
RETURNING id)sql",
                               pg::Params().AddBytes(spec).Add(priority).Add(model).Add(client)));
  return r.Int(0, 0);
}

absl::StatusOr<std::optional<FleetSubmission>> PgStore::TakeSubmission(
    const std::vector<std::string>& models) {
  if (models.empty()) return std::optional<FleetSubmission>();
  // A daemon that took one and died before answering leaves it to another
  // after a while.
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(R"sql(
WITH next AS (
  SELECT id FROM ktune.submissions
  WHERE NOT answered AND model = ANY($1::text[])
    AND (taken_at IS NULL OR taken_at < now() - interval '30 seconds')
  ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)
UPDATE ktune.submissions s SET taken_at = now() FROM next WHERE s.id = next.id
RETURNING s.id, s.spec, s.priority, s.model, s.client)sql",
                                                  pg::Params().Add(pg::ArrayLiteral(models))));
  if (r.rows() == 0) return std::optional<FleetSubmission>();
  FleetSubmission s;
  s.id = r.Int(0, 0);
  s.spec = r.Bytes(0, 1);
  s.priority = static_cast<int>(r.Int(0, 2));
  s.model = r.Text(0, 3);
  s.client = r.Text(0, 4);
  return std::optional<FleetSubmission>(std::move(s));
}

absl::Status PgStore::Answer(std::int64_t id, const std::string& job_id, int code,
                             const std::string& error) {
  return conn_.Run(R"sql(
UPDATE ktune.submissions SET answered = true, job_id = $2, code = $3, error = $4 WHERE id = $1)sql",
                   pg::Params().Add(id).Add(job_id).Add(code).Add(error));
}

absl::StatusOr<std::optional<std::string>> PgStore::AnswerOf(std::int64_t id) {
  KTUNE_ASSIGN_OR_RETURN(
      pg::Result r,
      conn_.Exec("SELECT answered, job_id, code, error FROM ktune.submissions WHERE id = $1",
                 pg::Params().Add(id)));
  if (r.rows() == 0) return absl::NotFoundError(StrCat("no submission ", id));
  if (r.Text(0, 0) != "t") return std::optional<std::string>();
  if (!r.Text(0, 3).empty()) {
    return absl::Status(static_cast<absl::StatusCode>(r.Int(0, 2)), r.Text(0, 3));
  }
  // Answered submissions are kept a day, then removed by the next one.
  (void)conn_.Run(
      "DELETE FROM ktune.submissions WHERE answered AND submitted_at < now() - interval '1 day'");
  return std::optional<std::string>(r.Text(0, 1));
}

}  // namespace ktune
