"""`vramkit.plan(...)`: the planner's answer as a dict, the same fields as `vramkit plan --json`.

It runs the `vramkit` command (found as described in find_cli) so that the Python and command
line answers cannot drift apart: the CLI is the one place that parses and validates plan options.
"""

import glob
import json
import os
import shutil
import subprocess


class PlanError(ValueError):
    """The planner refused the request (a usage error: the message is its one-line reason)."""


def find_cli(path=None):
    """Path of the `vramkit` executable: `path` (which must exist), else $VRAMKIT_CLI, the copy installed inside this
    package, a build folder of the source tree (build*/vramkit), then $PATH.

    Raises FileNotFoundError naming where it looked.
    """
    if path:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)
        raise FileNotFoundError("vramkit command %s: no such executable" % path)
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [c for c in (os.environ.get("VRAMKIT_CLI"),) if c]
    candidates.append(os.path.join(here, "bin", "vramkit"))
    root = os.path.dirname(os.path.dirname(here))
    candidates.extend(sorted(glob.glob(os.path.join(root, "build*", "vramkit"))))
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    found = shutil.which("vramkit")
    if found:
        return found
    raise FileNotFoundError(
        "the vramkit command was not found (looked at: %s and $PATH); build vramkit, install the "
        "package with `pip install ./python`, or set VRAMKIT_CLI" % ", ".join(candidates))


def _argv(model, options):
    argv = ["plan", str(model), "--json"]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            raise PlanError("plan option %s takes one value, not a list" % key)
        else:
            argv += [flag, str(value)]
    return argv


def plan(model, cli=None, **options):
    """Plans `model` (a preset name or a config.json path) with `vramkit plan` options given as
    keywords: plan("llama-3-8b", precision="amp-bf16", batch=8, seq=2048, gpu="h200").

    Returns the JSON object `vramkit plan --json` prints (with fit=True, the --fit ranking), plus
    "fits": False when the command reported that the run does not fit `gpu`. Raises PlanError for
    options the planner refuses and RuntimeError when the command fails otherwise.
    """
    exe = find_cli(cli)
    argv = _argv(model, options)
    proc = subprocess.run([exe] + argv, capture_output=True, text=True, check=False)
    if proc.returncode == 2:
        lines = proc.stderr.strip().splitlines()
        raise PlanError(lines[-1] if lines else "vramkit plan: usage error")
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise RuntimeError("vramkit %s failed (exit %d): %s" % (" ".join(argv), proc.returncode, proc.stderr.strip()))
    result = json.loads(proc.stdout)
    if proc.returncode == 1:
        result["fits"] = False
    return result
