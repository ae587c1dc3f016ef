#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora under fuzz/corpus/<target>/.

Run from the repository root when a seed should change; the output is
checked in. Seeds cover the valid forms each entry takes plus the hostile
ones: deep nesting, huge numbers, huge strings and NUL bytes. Needs protoc
(for the binary requests and worker replies) and sqlite3's Python module.
"""
import json
import os
import sqlite3
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")


def write(target, name, data):
    folder = os.path.join(OUT, target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def encode(message, text):
    return subprocess.run(
        ["protoc", "-I", os.path.join(ROOT, "proto"), "--encode=" + message,
         "ktune/v1/tuner.proto", "ktune/v1/worker.proto"],
        input=text.encode(), stdout=subprocess.PIPE, check=True).stdout


def expressions():
    seeds = {
        "arith": "ceil_div(N, a * 4) + a // 3 - a % 7 + 2 ** 10",
        "float": "2.0 * N / x / 1e9 + sqrt(x) + log2(N) + pow(x, 2.5)",
        "compare": "32 <= a * 2 <= 1024 and not flag or a & 1 == 0",
        "ternary": "a if flag else -a",
        "cond": "flag ? min(a, N) : max(a, 3)",
        "string": 'mode == "fast" && a != 0',
        "builtins": "abs(-a) + floor(x) + ceil(x) + round(x) + int(x) + float(a) + exp(x) + log(x)",
        "deep_parens": "(" * 5000 + "a" + ")" * 5000,
        "deep_unary": "-" * 5000 + "a",
        "deep_calls": "min(" * 2000 + "a" + ", 1)" * 2000,
        "huge_int": "99999999999999999999999999999 + a",
        "huge_float": "1e400 * x",
        "int_min_div": "(-9223372036854775807 - 1) / -1",
        "int_min_mod": "(-9223372036854775807 - 1) % -1",
        "shift": "1 << 70",
        "pow_overflow": "a ** 1000000",
        "div_zero": "a / 0 + a % 0 + a // 0",
        "nul": "a\x00 + 1",
        "long_name": "x" * 100000,
        "long_string": '"' + "s" * 100000 + '"',
        "unterminated": '"abc',
        "chain": " < ".join(["a"] * 2000),
    }
    for name, text in seeds.items():
        write("expr", name, text)


def job_specs():
    base = {
        "kernel": {"name": "saxpy", "code": "extern \"C\" __global__ void saxpy() {}"},
        "parameters": [
            {"name": "block_size_x", "range": {"start": 32, "stop": 1024, "step": 32}},
            {"name": "tile_size_x", "ints": [1, 2, 4, 8]},
        ],
        "constraints": ["block_size_x * tile_size_x <= 4096"],
        "problem": {"N": 1048576},
        "launch": {"grid": ["ceil_div(N, block_size_x * tile_size_x)"]},
        "arguments": [
            {"name": "y", "type": "F32",
             "buffer": {"size": "N", "direction": "INOUT", "uniform": {"low": -1, "high": 1}}},
            {"name": "a", "type": "F32", "scalar": "2.5"},
            {"name": "n", "type": "I32", "scalar": "N"},
        ],
        "objective": {"expression": "3.0 * 4 * N / time_s / 1e9", "direction": "MAXIMIZE",
                      "name": "GB/s"},
        "strategy": {"name": "auto", "maxEvaluations": 60, "seed": 1},
    }
    write("job_spec", "saxpy.json", json.dumps(base, indent=1))
    for path in sorted(os.listdir(os.path.join(ROOT, "kernels"))):
        if path.endswith(".json"):
            with open(os.path.join(ROOT, "kernels", path)) as f:
                spec = json.load(f)
            spec["kernel"].pop("file", None)
            spec["kernel"]["code"] = "__global__ void k() {}"
            if "verification" in spec:
                spec["verification"].pop("referenceKernel", None)
            write("job_spec", path, json.dumps(spec, indent=1))
    write("job_spec", "deep_nesting.json", "[" * 20000 + "]" * 20000)
    write("job_spec", "deep_objects.json", '{"problem":' * 5000 + "1" + "}" * 5000)
    huge = dict(base, problem={"N": 99999999999999999999999})
    write("job_spec", "huge_number.json", json.dumps(huge))
    write("job_spec", "huge_float.json", json.dumps(base).replace("2.5", "1e999"))
    many = dict(base, parameters=[{"name": "p%d" % i, "ints": list(range(64))}
                                  for i in range(12)])
    write("job_spec", "huge_space.json", json.dumps(many))
    long = dict(base, constraints=["block_size_x" + " + 1" * 20000 + " > 0"])
    write("job_spec", "long_constraint.json", json.dumps(long))
    write("job_spec", "huge_string.json", json.dumps(dict(base, kernel={"name": "k" * 200000,
                                                                        "code": "x"})))
    write("job_spec", "nul.json", json.dumps(base).replace("saxpy", "sa\\u0000xpy"))
    write("job_spec", "raw_nul.json", json.dumps(base).encode().replace(b"saxpy", b"sa\x00py"))
    typo = dict(base)
    typo["paramters"] = typo.pop("parameters")
    write("job_spec", "typo.json", json.dumps(typo))


SMALL_CACHE = {
    "device_name": "Fuzz GPU", "kernel_name": "k", "problem_size": [64, 32],
    "tune_params_keys": ["bs", "t"], "tune_params": {"bs": [32, 64], "t": [1, 2]},
    "objective": "time",
    "cache": {
        "32,1": {"bs": 32, "t": 1, "time": 2.0, "times": [1.9, 2.0, 2.1], "compile_time": 10,
                 "benchmark_time": 5},
        "32,2": {"bs": 32, "t": 2, "time": "CompilationFailedConfig", "compile_time": 20},
        "64,1": {"bs": 64, "t": 1, "time": 1.5, "times": [1.5, 1.5]},
        "64,2": {"bs": 64, "t": 2, "time": "RuntimeFailedConfig"},
    },
}


def recorded():
    text = json.dumps(SMALL_CACHE, indent=0)
    write("recorded", "small_cache.json", text)
    write("recorded", "cut_cache.json", text[: text.index('"64,1"') + 12])
    t4 = {"metadata": {"timeunit": "miliseconds"}, "results": [
        {"configuration": {"bs": 32, "t": 1},
         "times": {"compilation": 10, "runtimes": [1.9, 2.0, 2.1]},
         "invalidity": "correct", "objectives": ["time"], "measurements": [
             {"name": "time", "value": 2.0, "unit": "ms"}]},
        {"configuration": {"bs": 64, "t": 1}, "invalidity": "compile", "times": {}},
        {"configuration": {"bs": 32, "t": 2}, "invalidity": "runtime", "times": {}},
    ]}
    write("recorded", "small_t4.json", json.dumps(t4, indent=0))
    write("recorded", "deep.json", '{"cache":' + "[" * 20000)
    huge = json.loads(text)
    huge["cache"]["32,1"]["time"] = 1e308
    huge["cache"]["64,1"]["times"] = [1e-320] * 3
    write("recorded", "huge_numbers.json", json.dumps(huge))
    write("recorded", "nul.json", text.replace('"k"', '"k\\u0000k"'))


def merge_sources():
    # A real store written by ktune when one is at hand (a tiny tuning run
    # on the small recording), else a bare SQLite file of another program.
    tmp = os.path.join(OUT, "..", "tmp_store")
    os.makedirs(tmp, exist_ok=True)
    db = os.path.join(tmp, "k.db")
    ktune = os.environ.get("KTUNE_BIN")
    if ktune:
        if os.path.exists(db):
            os.remove(db)
        cache = os.path.join(OUT, "recorded", "small_cache.json")
        subprocess.run([ktune, "tune", "--local", "--db", db, "--device", "sim:" + cache,
                        "--max-evals", "4"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["sqlite3", db, "VACUUM"], check=False)
        with open(db, "rb") as f:
            data = f.read()
        write("merge_source", "store.db", data)
        write("merge_source", "store_cut.db", data[: len(data) // 2])
        write("merge_source", "store_flipped.db", data[:100] + b"\xff" * 16 + data[116:])
    other = os.path.join(tmp, "other.db")
    if os.path.exists(other):
        os.remove(other)
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.execute("INSERT INTO t VALUES (1)")
    con.commit()
    con.close()
    with open(other, "rb") as f:
        write("merge_source", "other_program.db", f.read())
    write("merge_source", "text.db", "not a database\n")
    write("merge_source", "empty.db", b"")
    for name in os.listdir(tmp):
        os.remove(os.path.join(tmp, name))
    os.rmdir(tmp)


def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def worker_replies():
    ok = encode("ktune.v1.WorkerResponse", """measurement {
  id: 7 status: OK samples_ms: [1.5, 1.25, 1.75, 1.5] wall_ms: 12 load_ms: 1 verify_ms: 2
}""")
    write("worker_reply", "measurement", frame(ok))
    fault = encode("ktune.v1.WorkerResponse", """measurement {
  id: 8 status: RUNTIME_FAULT message: "illegal address" context_lost: true
}""")
    write("worker_reply", "fault", frame(fault))
    write("worker_reply", "setup_done", frame(encode("ktune.v1.WorkerResponse",
                                                     'setup_done: "NVIDIA H200"')))
    write("worker_reply", "error", frame(encode("ktune.v1.WorkerResponse",
                                                'error: "out of memory"')))
    write("worker_reply", "nan_samples", frame(encode(
        "ktune.v1.WorkerResponse", "measurement { id: 9 status: OK samples_ms: [nan, inf, -inf, 0,"
        " -1, 1e308, 4.9e-324] }")))
    write("worker_reply", "huge_length", b"\xff\xff\xff\x7f" + ok)
    write("worker_reply", "short_length", struct.pack("<I", 3) + ok)
    write("worker_reply", "cut", frame(ok)[:-3])
    write("worker_reply", "two", frame(ok) + frame(fault))
    write("worker_reply", "nul_message", frame(encode(
        "ktune.v1.WorkerResponse", 'measurement { id: 1 status: OK message: "a\\000b" }')))


def rpc_requests():
    # First byte: 0 SubmitJob, 1 GetBest, 2 GetJob, 3 ListJobs, 4 CancelJob.
    # A replay's job: the recording's own space (the spec names none).
    submit = encode("ktune.v1.SubmitJobRequest", """spec {
  strategy { name: "random" max_evaluations: 3 seed: 1 }
}
priority: 3""")
    write("rpc", "submit", b"\x00" + submit)
    write("rpc", "submit_space", b"\x00" + encode("ktune.v1.SubmitJobRequest", """spec {
  kernel { name: "k" code: "__global__ void k() {}" }
  parameters { name: "bs" ints: [32, 64] }
  parameters { name: "t" range { start: 1 stop: 2 } }
  constraints: "bs * t <= 128"
  problem { key: "problem_size_x" value: 64 }
  problem { key: "problem_size_y" value: 32 }
  strategy { name: "bayes" max_evaluations: 3 seed: 1 }
}"""))
    write("rpc", "submit_empty", b"\x00")
    write("rpc", "submit_path", b"\x00" + encode("ktune.v1.SubmitJobRequest", """spec {
  kernel { name: "k" file: "/etc/passwd" compiler_options: "-I/etc" }
}"""))
    write("rpc", "get_best", b"\x01" + encode("ktune.v1.GetBestRequest", """kernel: "k"
device: "Fuzz GPU" problem { key: "problem_size_x" value: 64 }
problem { key: "problem_size_y" value: 32 }"""))
    write("rpc", "get_best_huge", b"\x01" + encode("ktune.v1.GetBestRequest", """kernel: "k"
problem { key: "problem_size_x" value: 9223372036854775807 }
problem { key: "problem_size_y" value: -9223372036854775808 }
problem { key: "" value: 0 }"""))
    write("rpc", "get_best_nul", b"\x01" + encode("ktune.v1.GetBestRequest",
                                                   'kernel: "k\\000x" device: "\\000"'))
    write("rpc", "get_job", b"\x02" + encode("ktune.v1.GetJobRequest", 'job_id: "1" include_measurements: true'))
    write("rpc", "list_jobs", b"\x03")
    write("rpc", "cancel", b"\x04" + encode("ktune.v1.CancelJobRequest", 'job_id: "1"'))


def http_requests():
    # Method, target, Authorization, Cookie, one per line; a fifth line
    # makes the request one over TLS. "{job}" is the id of the job the
    # harness ran. The routes' token is "fuzz-token".
    bearer = "Bearer fuzz-token"
    for name, lines in {
        "metrics": ["GET", "/metrics", bearer, ""],
        "jobs": ["GET", "/api/jobs", "", "ktune_token=fuzz-token"],
        "job": ["GET", "/api/jobs/{job}", bearer, ""],
        "job_from": ["GET", "/api/jobs/{job}?from=2&x=1", bearer, ""],
        "job_from_huge": ["GET", "/api/jobs/{job}?from=999999999999", bearer, ""],
        "job_from_junk": ["GET", "/api/jobs/{job}?from=-1%00", bearer, ""],
        "job_absent": ["GET", "/api/jobs/../../etc/passwd", bearer, ""],
        "devices": ["HEAD", "/api/devices", bearer, ""],
        "page": ["GET", "/jobs/{job}", "", "a=b; ktune_token=fuzz-token; c"],
        "sign_in": ["GET", "/jobs/{job}?token=fuzz-token", "", "", "tls"],
        "sign_in_elsewhere": ["GET", "//elsewhere.example/?token=fuzz-token", "", ""],
        "wrong_token": ["GET", "/?token=fuzz-tokem", "Bearer", "ktune_token="],
        "post": ["POST", "/metrics", bearer, ""],
        "asset": ["GET", "/static/chart.js", bearer, ""],
        "nul": ["GET\0", "/api/jobs/\0", "Bearer fuzz-token\0", "ktune_token=\0"],
    }.items():
        write("http", name, "\n".join(lines))


def main():
    expressions()
    job_specs()
    recorded()
    merge_sources()
    worker_replies()
    rpc_requests()
    http_requests()
    return 0


if __name__ == "__main__":
    sys.exit(main())
