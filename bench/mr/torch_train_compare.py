#!/usr/bin/env python3
"""Runs the same LLaMA-shaped training steps (amp bf16 autocast, AdamW, fixed seed, deterministic
algorithms) under PyTorch's own CUDA allocator and under vramkit's pool as a pluggable allocator,
one process per run, and compares: the loss of every step (must be identical: this is the
correctness check of the pluggable allocator), median step time, peak reserved and peak allocated
(vramkit's from its own statistics, since torch.cuda's do not work with a pluggable allocator).

    python3 bench/mr/torch_train_compare.py [--config FILE] [--steps N] [--json OUT]
    python3 bench/mr/torch_train_compare.py --run torch|vramkit ...    # one process, JSON on stdout

Interleaved (the default): every run's process starts at once and builds its model, then the runs
take turns, one step each, in an order that rotates every round (step i of every run lies within
one round of the others), so that a drift of the GPU or the host over the runs (clocks, other work)
falls on every allocator alike; the processes that wait hold their memory and run nothing.
--sequential runs one process after the other instead (for a GPU without room for all of them).
Every run's median is over the same steps (the first --warmup steps of every run are left out);
beside the ratio of medians, the median of the paired ratios (a run's step i over native's step i,
one round apart at most), and, when torch_repeat runs, native against itself: the spread the 1%
bar is judged beside.

--config is a Hugging Face LlamaConfig JSON (default tests/data/plan/configs/tinyllama-1.1b.json);
--layers overrides num_hidden_layers (e.g. 2 for a small model). --json is rewritten after every
few rounds and when the script is stopped (SIGTERM), so a run cut off keeps the steps it made.
Exit status 1 when the losses differ or a run fails, 77 when torch or a GPU is missing (so a test
can skip), 2 for bad arguments.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
SKIP = 77
TAG = "@@vramkit-train "  # prefixes the worker's protocol lines on stdout


# Each run is a process of its own: label -> (allocator, environment).
RUNS = {
    "torch": ("torch", {}),
    "torch_expandable": ("torch", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    "vramkit": ("vramkit", {"VRAMKIT_POOL_KIND": "pool"}),
    "vramkit_vmm": ("vramkit", {"VRAMKIT_POOL_KIND": "vmm"}),
    # The vmm pool allowed 5% above its highest allocation before it remaps (the default is 2%):
    # less remapping per step for a little more memory.
    "vramkit_vmm_slack5": ("vramkit", {"VRAMKIT_POOL_KIND": "vmm", "VRAMKIT_POOL_SLACK": "5%"}),
    # The vmm pool letting the allowance of recurring remaps grow to 5% (the default is 3%): on the
    # recorded 8-layer step replayed on the CPU it stops mapping after step 1 instead of step 9,
    # at 0.999x expandable segments' peak; the default keeps the committed replays within 1.03.
    "vramkit_vmm_slackmax5": ("vramkit", {"VRAMKIT_POOL_KIND": "vmm", "VRAMKIT_POOL_SLACK_MAX": "5%"}),
    "torch_repeat": ("torch", {}),  # native against itself: the noise of the measurement
    # The vmm pool writing its allocation trace (vramkit-trace v1) to --trace-out, so that the step
    # can be replayed through the pool on the CPU (`vramkit replay`); the trace is the same under
    # any pool. Its step time includes the tracing.
    "vramkit_vmm_traced": ("vramkit", {"VRAMKIT_POOL_KIND": "vmm"}),
}
VMM_KEYS = ("vmm.granules_mapped", "vmm.granules_remapped", "vmm.physical_creates", "vmm.map_ns",
            "vmm.unmap_ns", "vmm.growth_syncs", "vmm.growth_sync_ns")


class Worker:
    """One run's training state in this process: the model, the optimizer and the batches."""

    def __init__(self, args):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        self.args = args
        self.vramkit = None
        if args.run == "vramkit":
            import vramkit_torch
            vramkit_torch.use_vramkit_allocator(args.lib)
            self.vramkit = vramkit_torch
        import torch
        import transformers
        self.torch = torch

        with open(args.config) as f:
            cfg = json.load(f)
        if args.layers:
            cfg["num_hidden_layers"] = args.layers
        cfg.pop("architectures", None)
        config = transformers.LlamaConfig(**cfg)
        # Eager attention: SDPA/flash backward kernels are not deterministic, and the loss
        # comparison needs bitwise-repeatable runs.
        config._attn_implementation = "eager"
        self.config = config
        torch.manual_seed(args.seed)
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
        # Built on the GPU: initializing 1.1B parameters on the CPU took most of a run's ~37 s.
        with torch.device("cuda"):
            self.model = transformers.LlamaForCausalLM(config)
        self.model.train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=False, foreach=True)
        gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
        self.batches = [torch.randint(0, config.vocab_size, (args.batch, args.seq), generator=gen)
                        for _ in range(args.steps)]
        self.step_no = 0
        self.before = self.vmm_counters()
        torch.cuda.synchronize()

    def vmm_counters(self):
        if self.vramkit is None:
            return None
        st = self.vramkit.memory_stats()
        return {k: st.get(k, 0) for k in VMM_KEYS}

    def peaks(self):
        torch = self.torch
        if self.vramkit is None:
            return {"peak_reserved_bytes": torch.cuda.max_memory_reserved(),
                    "peak_allocated_bytes": torch.cuda.max_memory_allocated()}
        st = self.vramkit.memory_stats()
        # The pool's peak, or the CUDA pool's below it when higher (chunks the pool returned).
        return {"peak_reserved_bytes": max(st["reserved_bytes.all.peak"], st.get("device_reserved_bytes.peak", 0)),
                "pool_peak_reserved_bytes": st["reserved_bytes.all.peak"],
                "peak_allocated_bytes": st["allocated_bytes.all.peak"],
                "peak_requested_bytes": st["requested_bytes.all.peak"],
                "cross_stream_waits": st["num_cross_stream_waits"],
                "misuse_reports": st["num_misuse_reports"],
                "pool": st.get("resource", "?")}

    def step(self):
        """One training step, timed between two device synchronizations; its loss, time and the
        vmm pool's mapping work in it."""
        torch = self.torch
        ids = self.batches[self.step_no].cuda(non_blocking=False)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = self.model(input_ids=ids, labels=ids)
        out.loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        res = {"step": self.step_no, "step_s": time.perf_counter() - t0, "loss": out.loss.item()}
        del out, ids
        self.step_no += 1
        now = self.vmm_counters()
        if now is not None:
            res["mapping"] = {k: now[k] - self.before[k] for k in VMM_KEYS}
            self.before = now
        res.update(self.peaks())
        return res

    def summary(self):
        return {"params": sum(p.numel() for p in self.model.parameters()),
                "layers": self.config.num_hidden_layers}


def serve(args):
    """Worker mode: builds the model, says ready, then runs one step per `step` line on stdin and
    answers each on stdout (a line starting with TAG); `finish` or the end of stdin ends it."""
    def say(obj):
        sys.stdout.write(TAG + json.dumps(obj) + "\n")
        sys.stdout.flush()
    w = Worker(args)
    say({"ready": True, **w.summary()})
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "step":
            say(w.step())
        elif cmd == "finish":
            break
    return 0  # the pool writes its trace (VRAMKIT_TRACE_FILE) at exit


class Run:
    """The parent's side of one worker process."""

    def __init__(self, label, args):
        self.label = label
        kind, extra_env = RUNS[label]
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env.update(extra_env)
        if label == "vramkit_vmm_traced":
            env["VRAMKIT_TRACE_FILE"] = os.path.abspath(args.trace_out)
        cmd = [sys.executable, os.path.abspath(__file__), "--run", kind, "--serve"]
        for k in ("config", "layers", "steps", "batch", "seq", "seed", "lib"):
            v = getattr(args, k)
            if v not in (None, ""):
                cmd += ["--" + k, str(v)]
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True, env=env)
        self.info = None
        self.steps = []

    def read(self):
        for line in self.proc.stdout:
            if line.startswith(TAG):
                return json.loads(line[len(TAG):])
        self.proc.wait()
        self.err.seek(0)
        raise RuntimeError("%s run failed (exit %s):\n%s" % (self.label, self.proc.returncode,
                                                              self.err.read()[-4000:]))

    def ready(self):
        self.info = self.read()

    def step(self):
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        self.steps.append(self.read())

    def finish(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("finish\n")
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def result(self, args):
        """The run's figures from the steps made so far (none before its first step)."""
        if not self.steps:
            return None
        times = [s["step_s"] for s in self.steps]
        last = self.steps[-1]
        res = {"allocator": self.label, "losses": [s["loss"] for s in self.steps], "step_s": times,
               "median_step_s": statistics.median(times[args.warmup:] or times),
               "batch": args.batch, "seq": args.seq, "warmup": args.warmup}
        res.update(self.info or {})
        res.pop("ready", None)
        for k in ("peak_reserved_bytes", "pool_peak_reserved_bytes", "peak_allocated_bytes",
                  "peak_requested_bytes", "cross_stream_waits", "misuse_reports", "pool"):
            if k in last:
                res[k] = last[k]
        if "mapping" in last:
            per_step = {k: [s["mapping"][k] for s in self.steps] for k in VMM_KEYS}
            res["per_step_mapping"] = per_step
            # Mapping work of the virtual-memory pool during the timed steps.
            res["timed_steps_mapping"] = {k: sum(v[args.warmup:]) for k, v in per_step.items()}
        res["peak_reserved_over_peak_allocated"] = res["peak_reserved_bytes"] / max(1, res["peak_allocated_bytes"])
        return res


def quartiles(xs):
    xs = sorted(xs)
    if len(xs) < 2:
        return [xs[0], xs[0], xs[0]] if xs else [None] * 3
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return [q[0], q[1], q[2]]


def compare(results, args):
    """Adds, for every run, its losses check and ratios against PyTorch's native run (and against
    expandable segments for peak reserved); returns whether every run's losses equal native's."""
    t = results["torch"]
    ratios = {}
    paired = {}
    same = True
    for label, r in results.items():
        if not isinstance(r, dict) or "losses" not in r or label == "torch":
            continue
        n = min(len(t["losses"]), len(r["losses"]))
        r["losses_identical_to_torch"] = r["losses"][:n] == t["losses"][:n]
        r["max_loss_diff_to_torch"] = max((abs(a - b) for a, b in zip(t["losses"], r["losses"])), default=0.0)
        same = same and r["losses_identical_to_torch"]
        # Only the steps both runs made, so that a run cut off compares like with like.
        med_t = statistics.median(t["step_s"][args.warmup:n] or t["step_s"][:n])
        med_r = statistics.median(r["step_s"][args.warmup:n] or r["step_s"][:n])
        ratios["step_time_%s_over_torch" % label] = med_r / med_t
        if n > 2:  # the same from step 2 on (every run's first two steps left out)
            ratios["step_time_%s_over_torch_from_step2" % label] = (
                statistics.median(r["step_s"][2:n]) / statistics.median(t["step_s"][2:n]))
        pr = [a / b for a, b in zip(r["step_s"][args.warmup:n], t["step_s"][args.warmup:n])]
        if pr:
            paired[label] = dict(zip(("q1", "median", "q3"), quartiles(pr)))
        ratios["peak_reserved_%s_over_torch" % label] = r["peak_reserved_bytes"] / max(1, t["peak_reserved_bytes"])
        if "torch_expandable" in results and label.startswith("vramkit"):
            ratios["peak_reserved_%s_over_torch_expandable" % label] = (
                r["peak_reserved_bytes"] / max(1, results["torch_expandable"]["peak_reserved_bytes"]))
    results["ratios"] = ratios
    results["paired_step_ratios"] = paired
    results["losses_identical"] = same
    if "torch_repeat" in results:
        results["torch_repeatable"] = results["torch_repeat"]["losses_identical_to_torch"]
    return same


def measure(args, labels):
    """Runs the labels' workers (interleaved or one after another); returns the results so far
    through `collect`, also when interrupted."""
    runs = []
    state = {"rounds": 0, "order": "sequential" if args.sequential else "interleaved"}

    def collect():
        results = {}
        for r in runs:
            res = r.result(args)
            if res is not None:
                results[r.label] = res
        if "torch" in results:
            compare(results, args)
        results["measurement"] = {"order": state["order"], "rounds": state["rounds"], "steps": args.steps,
                                  "warmup": args.warmup, "runs": labels}
        return results

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(collect(), f, indent=1)

    def stop(signum, frame):
        for r in runs:
            r.kill()
        save()
        print("stopped by signal %d after %d rounds; partial results in %s" % (signum, state["rounds"], args.json),
              flush=True)
        sys.exit(1)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        if args.sequential:
            for label in labels:
                run = Run(label, args)
                runs.append(run)
                run.ready()
                for _ in range(args.steps):
                    run.step()
                run.finish()
                state["rounds"] = args.steps
                save()
        else:
            t0 = time.perf_counter()
            runs = [Run(label, args) for label in labels]
            for run in runs:
                run.ready()
            print("interleaved: %d processes ready after %.1f s" % (len(runs), time.perf_counter() - t0), flush=True)
            for i in range(args.steps):
                k = i % len(runs)
                for run in runs[k:] + runs[:k]:  # the order rotates every round
                    run.step()
                state["rounds"] = i + 1
                if i % 5 == 4:
                    save()
            for run in runs:
                run.finish()
    except RuntimeError as e:
        for r in runs:
            r.kill()
        save()
        print(str(e), file=sys.stderr)
        return None
    save()
    return collect()


def report(results):
    for label, r in results.items():
        if not isinstance(r, dict) or "losses" not in r:
            continue
        print("%-18s median step %.4f s  peak reserved %8.1f MiB  peak allocated %8.1f MiB  "
              "reserved/allocated %.3f  losses %s" % (
                  label, r["median_step_s"], r["peak_reserved_bytes"] / 2**20,
                  r["peak_allocated_bytes"] / 2**20, r["peak_reserved_over_peak_allocated"],
                  " ".join("%.6f" % x for x in r["losses"])), flush=True)
        print("%-18s step s %s" % (label, " ".join("%.4f" % x for x in r["step_s"])))
        ps = r.get("per_step_mapping")
        if ps:
            print("%-18s granules remapped per step %s; created per step %s; mapping ms per step %s; "
                  "synchronizations before a remap per step %s (ms %s)" % (
                      label, ps["vmm.granules_remapped"], ps["vmm.physical_creates"],
                      [round((a + b) / 1e6, 2) for a, b in zip(ps["vmm.map_ns"], ps["vmm.unmap_ns"])],
                      ps["vmm.growth_syncs"], [round(x / 1e6, 2) for x in ps["vmm.growth_sync_ns"]]),
                  flush=True)
    m = results.get("measurement", {})
    print("%s, %d rounds, median of steps %d-%d of every run" % (
        m.get("order"), m.get("rounds", 0), m.get("warmup", 0), m.get("rounds", 0) - 1))
    if "ratios" in results:
        print("losses identical (every run vs torch): %s" % results["losses_identical"])
        print("ratios: " + ", ".join("%s %.4f" % kv for kv in sorted(results["ratios"].items())))
        print("paired step ratios (q1 / median / q3 of run step i over native step i): " + ", ".join(
            "%s %.4f / %.4f / %.4f" % (k, v["q1"], v["median"], v["q3"])
            for k, v in sorted(results["paired_step_ratios"].items())))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=os.path.join(ROOT, "tests/data/plan/configs/tinyllama-1.1b.json"))
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2,
                    help="steps left out of every run's median (the same for every allocator)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--run", choices=["torch", "vramkit"], help="one process: all steps, JSON on stdout")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sequential", action="store_true",
                    help="one process after the other instead of interleaved steps")
    ap.add_argument("--json")
    ap.add_argument("--trace-out", help="where the vramkit_vmm_traced run writes its allocation trace")
    ap.add_argument("--runs", default="torch,vramkit_vmm,torch_expandable,torch_repeat",
                    help="comma-separated, from %s (torch always runs, first)" % ",".join(RUNS))
    args = ap.parse_args()
    if args.steps <= args.warmup:
        print("--steps must exceed --warmup", file=sys.stderr)
        return 2
    if not os.path.isfile(args.config):
        print("config %s not found" % args.config, file=sys.stderr)
        return 2
    labels = [x for x in args.runs.split(",") if x]
    unknown = [x for x in labels if x not in RUNS]
    if unknown:
        print("--runs: unknown run %s (known: %s)" % (", ".join(unknown), ", ".join(RUNS)), file=sys.stderr)
        return 2
    if len(set(labels)) != len(labels):
        print("--runs: a run is named twice", file=sys.stderr)
        return 2
    if "vramkit_vmm_traced" in labels and not args.trace_out:
        print("--runs vramkit_vmm_traced needs --trace-out FILE", file=sys.stderr)
        return 2
    if args.trace_out and "vramkit_vmm_traced" not in labels:
        print("--trace-out is written by the vramkit_vmm_traced run, which --runs does not name", file=sys.stderr)
        return 2
    if args.serve and not args.run:
        print("--serve needs --run", file=sys.stderr)
        return 2
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print("skipped: %s" % e, file=sys.stderr)
        return SKIP
    if args.serve:
        return serve(args)
    if args.run:
        w = Worker(args)
        steps = [w.step() for _ in range(args.steps)]
        print(json.dumps({"steps": steps, **w.summary()}))
        return 0
    if not torch.cuda.is_available():
        print("skipped: PyTorch sees no CUDA device", file=sys.stderr)
        return SKIP
    if "torch" in labels:
        labels.remove("torch")
    labels.insert(0, "torch")
    results = measure(args, labels)
    if results is None:
        return 1
    report(results)
    return 0 if results.get("losses_identical", False) else 1


if __name__ == "__main__":
    sys.exit(main())
