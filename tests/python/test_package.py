"""The vramkit package: vramkit_torch still importable and re-exported, vramkit.plan() equal to
`vramkit plan --json`, its errors, and `pip install ./python` offline with the CLI bundled."""

import json
import os
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.abspath(os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, PYDIR)

import vramkit  # noqa: E402
import vramkit_torch  # noqa: E402

CLI = os.environ.get("VRAMKIT_CLI")


class Package(unittest.TestCase):
    def test_allocator_is_reexported(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("torch not importable")
        self.assertIs(vramkit.use_vramkit_allocator, vramkit_torch.use_vramkit_allocator)
        self.assertIs(vramkit.memory_stats, vramkit_torch.memory_stats)

    @unittest.skipUnless(CLI, "VRAMKIT_CLI not set (CTest sets it)")
    def test_plan_equals_cli_json(self):
        for args, kw in (
            (["gpt2", "--batch", "8", "--seq", "512"], dict(batch=8, seq=512)),
            (["gpt2", "--precision", "amp-bf16", "--checkpointing", "full", "--gpu", "h200"],
             dict(precision="amp-bf16", checkpointing="full", gpu="h200")),
        ):
            out = subprocess.run([CLI, "plan"] + args + ["--json"], capture_output=True, text=True, check=True)
            self.assertEqual(vramkit.plan(args[0], **kw), json.loads(out.stdout))

    @unittest.skipUnless(CLI, "VRAMKIT_CLI not set (CTest sets it)")
    def test_plan_fit_and_errors(self):
        fit = vramkit.plan("gpt2", batch=16, gpu="rtx4090", fit=True)
        self.assertIn("fits", fit)
        with self.assertRaises(vramkit.PlanError) as e:
            vramkit.plan("gpt2", precision="fp64")
        self.assertIn("fp64", str(e.exception))
        self.assertNotIn("\n", str(e.exception))
        with self.assertRaises(vramkit.PlanError):
            vramkit.plan("no-such-model")
        with self.assertRaises(FileNotFoundError):
            vramkit.plan("gpt2", cli="/nonexistent/vramkit")

    @unittest.skipUnless(CLI and os.environ.get("VRAMKIT_BUILD_DIR"), "needs a built tree (CTest sets it)")
    def test_pip_install_offline_bundles_the_cli(self):
        with tempfile.TemporaryDirectory() as tmp:
            site = os.path.join(tmp, "site")
            p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                                "--no-cache-dir", "--target", site, PYDIR],
                               capture_output=True, text=True)
            if p.returncode != 0 and "No module named pip" in p.stderr:
                self.skipTest("pip is not installed")
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
            for f in ("vramkit/__init__.py", "vramkit/activation_offload.py", "vramkit_torch.py", "vramkit/bin/vramkit"):
                self.assertTrue(os.path.exists(os.path.join(site, f)), f)
            env = dict(os.environ, PYTHONPATH=site)
            env.pop("VRAMKIT_CLI")
            code = ("import vramkit, json; r = vramkit.plan('gpt2', batch=2); "
                    "print(vramkit.find_cli(), r['schema_version'])")
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn(os.path.join(site, "vramkit", "bin", "vramkit"), out.stdout)

    def test_wheel_without_native_parts(self):
        sys.path.insert(0, os.path.join(PYDIR, "_build_backend"))
        import vramkit_build

        old = os.environ.get("VRAMKIT_WHEEL_NATIVE")
        os.environ["VRAMKIT_WHEEL_NATIVE"] = "0"
        try:
            with tempfile.TemporaryDirectory() as tmp:
                name = vramkit_build.build_wheel(tmp)
                self.assertTrue(name.endswith("-py3-none-any.whl"))
                with zipfile.ZipFile(os.path.join(tmp, name)) as z:
                    names = set(z.namelist())
                    record = z.read("vramkit-0.1.0.dist-info/RECORD").decode()
                self.assertIn("vramkit/offloaded_adamw.py", names)
                self.assertIn("vramkit_torch.py", names)
                self.assertNotIn("vramkit/bin/vramkit", names)
                self.assertIn("vramkit/pinned_pool.py,sha256=", record)
        finally:
            if old is None:
                del os.environ["VRAMKIT_WHEEL_NATIVE"]
            else:
                os.environ["VRAMKIT_WHEEL_NATIVE"] = old


if __name__ == "__main__":
    unittest.main()
