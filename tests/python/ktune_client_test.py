#!/usr/bin/env python3
"""The Python client (python/ktune) against a ktuned replaying a recording:
tune with wait, watch, jobs, best with its fallback and tune_on_miss, and
reading the store without a daemon.

    PYTHONPATH=build/ci/python ktune_client_test.py KTUNED KTUNE SOURCE_DIR
"""
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

import ktune

KTUNED, KTUNE, SOURCE = sys.argv[1:4]
RECORDING = os.path.join(SOURCE, "kernels/recorded/pnpoly_kttvalues_RTX_2080_Ti.json.gz")
SPEC = {
    "kernel": {"name": "cn_pnpoly"},
    "parameters": [
        {"name": "between_method", "ints": [0, 1, 2, 3]},
        {"name": "block_size_x", "ints": [32, 64, 96, 128, 160, 192, 224, 256]},
        {"name": "tile_size", "ints": [1, 2, 4, 6, 8]},
        {"name": "use_method", "ints": [0, 1, 2]},
    ],
    "problem": {"n": 20000000},
    "strategy": {"name": "random", "seed": 2, "maxEvaluations": 15},
}


class DaemonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="ktune_pyclient_")
        cls.db = os.path.join(cls.work, "k.db")
        port_file = os.path.join(cls.work, "addr")
        cls.daemon = subprocess.Popen(
            [KTUNED, "--listen", "127.0.0.1:0", "--port-file", port_file, "--db", cls.db,
             "--device", "sim:" + RECORDING, "--sim-speed", "50"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        def address():
            if not os.path.exists(port_file):
                return ""
            with open(port_file) as f:
                return f.read().strip()
        for _ in range(600):
            if address():
                break
            time.sleep(0.05)
        cls.address = address()
        cls.k = ktune.connect(cls.address, client="pytest@here")

    @classmethod
    def tearDownClass(cls):
        cls.k.close()
        cls.daemon.terminate()
        cls.daemon.wait()
        shutil.rmtree(cls.work)

    def test_a_tune_waits_for_the_job_and_best_answers(self):
        job = self.k.tune(SPEC, wait=True)
        self.assertEqual(job.state, "succeeded")
        self.assertEqual(job.evaluations, 15)
        self.assertEqual(job.client, "pytest@here")
        self.assertIsNotNone(job.best)
        best = self.k.best("cn_pnpoly", problem={"n": 20000000})
        self.assertEqual(best.match, "exact")
        self.assertEqual(best.key, job.best.key)
        self.assertEqual(best.config["block_size_x"], job.best.config["block_size_x"])
        near = self.k.best("cn_pnpoly", problem={"n": 10000000})
        self.assertEqual(near.match, "nearest_problem")
        self.assertGreater(near.problem_distance, 0)
        self.assertIsNone(self.k.best("no_such_kernel"))
        self.assertIn(job.id, [j.id for j in self.k.jobs()])

    def test_b_watch_follows_every_measurement(self):
        spec = dict(SPEC, strategy={"name": "random", "seed": 9, "maxEvaluations": 10})
        job = self.k.tune(spec, wait=False)
        events = list(self.k.watch(job.id, from_start=True))
        self.assertEqual(sum(e["kind"] == "measurement" for e in events), 10)
        self.assertEqual(events[-1], {"kind": "state", "job_id": job.id, "state": "succeeded"})
        self.assertTrue(all("config" in e for e in events if e["kind"] == "measurement"))

    def test_c_a_miss_queues_the_exact_problem(self):
        miss = self.k.best("cn_pnpoly", problem={"n": 5000000}, tune_on_miss=True, spec=SPEC)
        self.assertEqual(miss.match, "nearest_problem")
        self.assertTrue(miss.tuning_job_id)
        for _ in self.k.watch(miss.tuning_job_id):
            pass
        exact = self.k.best("cn_pnpoly", problem={"n": 5000000})
        self.assertEqual(exact.match, "exact")
        self.assertEqual(exact.job_id, miss.tuning_job_id)

    def test_d_refusals_name_the_field(self):
        with self.assertRaises(ktune.KtuneError) as e:
            self.k.tune(dict(SPEC, strategy={"name": "nope"}), wait=False)
        self.assertIn("strategy", str(e.exception))
        with self.assertRaises(ktune.KtuneError) as e:
            self.k.tune({"kernel": {"name": "k"}, "parameterz": []})
        self.assertIn("parameterz", str(e.exception))
        with self.assertRaises(ktune.KtuneError) as e:
            ktune.connect("127.0.0.1:99999")
        self.assertIn("port 99999 is not a port", str(e.exception))
        for address, says in [("localhost", "localhost: no port"), ("[::1]", "[::1]: no port"),
                              ("::1", "goes in brackets"), (":7070", ":7070: no host"),
                              ("h:-1", "port -1 is not a port"), ("[::1:7070", "no closing"),
                              ("", "empty address")]:
            with self.assertRaises(ktune.KtuneError) as e:
                ktune.connect(address)
            self.assertIn(says, str(e.exception))
        for address in ["[::1]:7070", "dns:///gpu7", "unix:/tmp/a:99999", "ipv4:10.0.0.1:7070"]:
            ktune.connect(address, timeout=0.1).close()

    def test_e_the_store_answers_without_a_daemon(self):
        self.k.tune(SPEC, wait=True)
        with ktune.open_store(self.db) as store:
            exact = store.best("cn_pnpoly", "NVIDIA GeForce RTX 2080 Ti", {"n": 20000000})
            near = store.best("cn_pnpoly", "NVIDIA GeForce RTX 2080 Ti", {"n": 19000000})
            self.assertEqual(exact.match, "exact")
            self.assertEqual(exact.key, self.k.best("cn_pnpoly", problem={"n": 20000000}).key)
            self.assertEqual(near.match, "nearest_problem")
            self.assertIsNone(store.best("cn_pnpoly", "other GPU", {"n": 1}))
            self.assertIn("succeeded", {j.state for j in store.jobs()})
        with self.assertRaises(ktune.KtuneError):
            ktune.open_store(os.path.join(self.work, "absent.db"))
        junk = os.path.join(self.work, "junk.db")
        with open(junk, "w") as f:
            f.write("not a database")
        with self.assertRaises(ktune.KtuneError):
            ktune.open_store(junk)

    def test_f_a_job_whose_process_ended_reads_interrupted(self):
        local = os.path.join(self.work, "local.db")
        subprocess.run([KTUNE, "tune", "--local", "--device", "sim:" + RECORDING,
                        "--max-evals", "3", "--db", local], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(f"/proc/{os.getpid()}/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        me = "|".join([socket.gethostname(), boot, os.readlink("/proc/self/ns/pid"),
                       str(os.getpid()), str(start)])
        for runner, state in [(me, "running"),                            # this live process
                              (me[:me.rfind("|") + 1] + str(start + 1), "interrupted"),  # ended
                              ("elsewhere|b|pid:[1]|42|7", "running")]:   # cannot be told
            with sqlite3.connect(local) as db:
                db.execute("UPDATE jobs SET state = 'running', runner = ?", (runner,))
            with ktune.open_store(local) as store:
                job = store.jobs()[0]
            self.assertEqual(job.state, state, runner)
            if state == "interrupted":
                self.assertIn(f"pid {os.getpid()} on {socket.gethostname()}) ended", job.message)
                self.assertIn("run the same job again", job.message)

    def test_g_the_store_reads_without_grpc(self):
        # A node with the standard library alone: gRPC and protobuf fail
        # to import, the store still answers and connect says what is missing.
        script = (
            "import sys\n"
            "for m in ('grpc', 'google', 'google.protobuf'): sys.modules[m] = None\n"
            "import ktune\n"
            "with ktune.open_store(sys.argv[1]) as s:\n"
            "    print(s.best('cn_pnpoly', 'NVIDIA GeForce RTX 2080 Ti', {'n': 20000000}).match)\n"
            "try:\n"
            "    ktune.connect('127.0.0.1:1')\n"
            "except ImportError as e:\n"
            "    print(e)\n")
        out = subprocess.run([sys.executable, "-c", script, self.db], check=True,
                             capture_output=True, text=True).stdout.splitlines()
        self.assertEqual(out[0], "exact")
        self.assertIn("ktune.connect needs gRPC for Python (Debian: python3-grpcio", out[1])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
