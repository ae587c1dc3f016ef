#!/usr/bin/env bash
# Checks what can be checked of deploy/ without a cluster or a service
# manager: the Kubernetes manifests parse and carry what they must, the
# systemd unit passes systemd-analyze verify (when systemd is there), the
# Slurm scripts parse, every shell script passes shellcheck (when it is
# there), the container file names its stages.
#   tests/deploy/check.sh [SOURCE_DIR [KTUNED]]
# (defaults: this repository, and its build/default or build/ci ktuned;
# without one the systemd unit is verified against /usr/local/bin/ktuned's
# path as written).
set -euo pipefail
src=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
ktuned=${2:-}
if [ -z "$ktuned" ]; then
  for b in "$src/build/default/server/ktuned" "$src/build/ci/server/ktuned"; do
    if [ -x "$b" ]; then ktuned=$b; break; fi
  done
fi
python=/usr/bin/python3
[ -x "$python" ] || python=python3
"$python" - "$src" <<'PY'
import sys, yaml
src = sys.argv[1]
ds = list(yaml.safe_load_all(open(src + "/deploy/k8s/ktuned-daemonset.yaml")))
kinds = [d["kind"] for d in ds]
assert kinds == ["DaemonSet", "Service"], kinds
pod = ds[0]["spec"]["template"]["spec"]
args = pod["containers"][0]["args"]
assert "--token-file" in args and "--tls-cert" in args, args
assert "--http" in args, args  # metrics and dashboard, behind the same TLS and token
assert ds[0]["spec"]["selector"]["matchLabels"] == ds[0]["spec"]["template"]["metadata"]["labels"]
assert ds[1]["spec"]["selector"] == ds[0]["spec"]["template"]["metadata"]["labels"]
job = list(yaml.safe_load_all(open(src + "/deploy/k8s/tune-job.yaml")))
assert [d["kind"] for d in job] == ["Job"]
c = job[0]["spec"]["template"]["spec"]["containers"][0]
assert "--local" in c["args"] and c["resources"]["limits"]["nvidia.com/gpu"] == 1
fleet = list(yaml.safe_load_all(open(src + "/deploy/k8s/fleet.yaml")))
assert [d["kind"] for d in fleet] == ["StatefulSet", "Service", "DaemonSet"], fleet
daemon = fleet[2]["spec"]["template"]["spec"]["containers"][0]
assert not any("postgresql://" in a or "password" in a.lower() for a in daemon["args"]), daemon["args"]
env = {e["name"]: e for e in daemon["env"]}
for name, key in (("KTUNE_DB", "uri"), ("PGPASSWORD", "password")):
    ref = env[name]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "ktune-db", "key": key}, ref
db = fleet[0]["spec"]["template"]["spec"]["containers"][0]
assert {e["name"]: e for e in db["env"]}["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "ktune-db"
assert fleet[1]["spec"]["selector"] == fleet[0]["spec"]["template"]["metadata"]["labels"]
print("manifests: ok")
PY
if [ -z "$ktuned" ]; then
  echo "systemd unit: no ktuned built (give its path as the second argument), not checked"
elif command -v systemd-analyze >/dev/null 2>&1; then
  unit=$(mktemp -d)/ktuned.service
  sed "s|/usr/local/bin/ktuned|$ktuned|" "$src/deploy/systemd/ktuned.service" >"$unit"
  systemd-analyze verify "$unit"
  echo "systemd unit: ok"
else
  echo "systemd unit: systemd-analyze not here, not checked"
fi
for script in "$src/deploy/slurm/campaign.sh" "$src/deploy/slurm/tune-task.sbatch"; do
  bash -n "$script"
done
grep -q 'ktune merge\|KTUNE merge' "$src/deploy/slurm/campaign.sh"
grep -q '^#SBATCH --gpus=1$' "$src/deploy/slurm/tune-task.sbatch"
echo "slurm scripts: ok"
# Every shell script of the repository passes shellcheck (scripts/setup.sh
# installs it).
if command -v shellcheck >/dev/null 2>&1; then
  (cd "$src" && shellcheck .ci/run scripts/*.sh bench/*.sh deploy/*.sh deploy/slurm/* tests/deploy/*.sh tests/consumer/*.sh)
  echo "shellcheck: ok"
else
  echo "shellcheck: not here, scripts not linted"
fi
grep -q '^FROM .*-devel-.* AS build$' "$src/deploy/container/Containerfile"
grep -q '^FROM .*-runtime-' "$src/deploy/container/Containerfile"
echo "container file: ok"
