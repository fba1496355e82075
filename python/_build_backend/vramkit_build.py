"""PEP 517 build backend for the vramkit Python package, standard library only (so that
`pip install ./python` works without network access).

The wheel holds the `vramkit` package, the `vramkit_torch` module and, when found or built, the
`vramkit` executable (vramkit/bin/), libvramkit_torch.so (beside vramkit_torch.py) and
libvramkit_compress.so (the fp8 codec, in vramkit/).
"""

import base64
import glob
import hashlib
import os
import stat
import subprocess
import zipfile

NAME = "vramkit"
VERSION = "0.1.0"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
ROOT = os.path.dirname(HERE)  # the source tree
TAG = "py3-none-any"


def _native_tag():
    import sysconfig

    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "py3-none-" + plat


def _find_built():
    """(cli, libvramkit_torch.so or None) from $VRAMKIT_BUILD_DIR or a build*/ folder, else None."""
    dirs = [os.environ["VRAMKIT_BUILD_DIR"]] if os.environ.get("VRAMKIT_BUILD_DIR") else sorted(
        glob.glob(os.path.join(ROOT, "build*")))
    for d in dirs:
        cli = os.path.join(d, "vramkit")
        if os.path.isfile(cli):
            lib = os.path.join(d, "libvramkit_torch.so")
            return cli, lib if os.path.isfile(lib) else None
    if os.environ.get("VRAMKIT_BUILD_DIR"):
        raise RuntimeError("VRAMKIT_BUILD_DIR=%s holds no vramkit executable" % dirs[0])
    return None


def _build_with_cmake():
    build = os.path.join(ROOT, "build-python")
    args = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DVRAMKIT_BUILD_BENCH=OFF"]
    args += os.environ.get("VRAMKIT_CMAKE_ARGS", "").split()
    subprocess.run(args, check=True)
    subprocess.run(["cmake", "--build", build, "--target", "vramkit_cli"], check=True)
    # The allocator library exists only in CUDA builds; build it when the target is there.
    subprocess.run(["cmake", "--build", build, "--target", "vramkit_torch"], check=False)
    subprocess.run(["cmake", "--build", build, "--target", "vramkit_compress_c"], check=False)
    return _find_built()


def _files():
    out = [(os.path.join(HERE, "vramkit_torch.py"), "vramkit_torch.py")]
    for path in sorted(glob.glob(os.path.join(HERE, "vramkit", "*.py"))):
        out.append((path, "vramkit/" + os.path.basename(path)))
    native = None
    if os.environ.get("VRAMKIT_WHEEL_NATIVE", "1") != "0":
        native = _find_built() or _build_with_cmake()
        if native is None:
            raise RuntimeError("vramkit wheel: CMake built no vramkit executable")
        cli, lib = native
        out.append((cli, "vramkit/bin/vramkit"))
        if lib:
            out.append((lib, "libvramkit_torch.so"))
        codec = os.path.join(os.path.dirname(cli), "libvramkit_compress.so")
        if os.path.isfile(codec):
            out.append((codec, "vramkit/libvramkit_compress.so"))
    return out, native is not None


def _metadata():
    return "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: GPU and host memory as one system\nRequires-Python: >=3.9\n" % (NAME, VERSION)


def _record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arc, digest, len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files, native = _files()
    tag = _native_tag() if native else TAG
    dist_info = "%s-%s.dist-info" % (NAME, VERSION)
    wheel_name = "%s-%s-%s.whl" % (NAME, VERSION, tag)
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as z:
        for src, arc in files:
            with open(src, "rb") as f:
                data = f.read()
            info = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            # pip restores the executable bit only for entries marked as regular files.
            mode = 0o755 if os.access(src, os.X_OK) and not arc.endswith(".py") else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            records.append(_record_line(arc, data))
        meta = {
            "METADATA": _metadata(),
            "WHEEL": "Wheel-Version: 1.0\nGenerator: vramkit_build\nRoot-Is-Purelib: %s\nTag: %s\n"
            % ("false" if native else "true", tag),
        }
        for name, text in meta.items():
            arc = dist_info + "/" + name
            z.writestr(arc, text)
            records.append(_record_line(arc, text.encode()))
        records.append(dist_info + "/RECORD,,")
        z.writestr(dist_info + "/RECORD", "\n".join(records) + "\n")
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    raise RuntimeError("vramkit: no sdist; install from the source tree (pip install ./python)")
