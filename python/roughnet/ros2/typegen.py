"""Build ``roughnet_msgs/srv/Bytes`` (bytes in, bytes out), the ROS 2 service type of the ``ros2``
endpoint's ``request_reply = "service"`` mode and of the dds driver's ROS 2 services.

    python -m roughnet.ros2.typegen [--prefix DIR]       (``make extras`` runs it)

Why a type of our own: the installed Kilted wheels ship no service whose request and response both carry
bytes (their services are rcl_interfaces' parameter services, lifecycle_msgs, action_msgs' CancelGoal,
type_description_interfaces' GetTypeDescription: names, strings, parameter values; ``std_srvs`` is not
on PyPI), and a roughnet message (a 32-byte binary header + filler) must go both ways unchanged.

The type, as IDL (what ``uint8[] data`` / ``---`` / ``uint8[] data`` in a ``.srv`` becomes)::

    module roughnet_msgs { module srv {
      struct Bytes_Request { sequence<uint8> data; };
      struct Bytes_Response { sequence<uint8> data; }; }; };

On DDS (rmw's naming): topics ``rq/<service>Request`` and ``rr/<service>Reply``, types
``roughnet_msgs::srv::dds_::Bytes_Request_`` and ``..._Response_``, each one ``sequence<octet>``, i.e.
the same CDR as the dds driver's ``roughnet::Bytes``.  A user's own ROS 2 install talks to it after
building the same three-line ``.srv`` in a package named ``roughnet_msgs``.

How: the wheels' rosidl generators (C, C type support dispatch, Fast DDS C type support, C
introspection, Python), called as Python functions because the ``rosidl generate`` command refuses to
run with the wheels' duplicated entry points, each into its own folder (two of them write
``detail/bytes__type_support.c``); then gcc/g++ against the wheels' headers and libraries.  The result
is the Python package ``roughnet_msgs`` (generated modules, the type support extension and the five
``libroughnet_msgs__*.so``) in ``--prefix`` (default: this Python's site-packages).  The C type support
dlopens the Fast DDS type support library by its bare name, which the dynamic linker resolves from the
libraries already loaded (each is linked with its name as soname): ``load()`` loads them first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

PACKAGE = "roughnet_msgs"
IDL = """module roughnet_msgs {
  module srv {
    struct Bytes_Request {
      sequence<uint8> data;
    };
    struct Bytes_Response {
      sequence<uint8> data;
    };
  };
};
"""
#: The DDS type names and topic prefixes rmw gives a service of this type.
REQUEST_TYPE = "roughnet_msgs::srv::dds_::Bytes_Request_"
RESPONSE_TYPE = "roughnet_msgs::srv::dds_::Bytes_Response_"


def default_prefix() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def library_dir(prefix: Path | None = None) -> Path:
    return (prefix or default_prefix()) / PACKAGE


def installed(prefix: Path | None = None) -> bool:
    d = library_dir(prefix)
    return (d / "srv" / "_bytes.py").is_file() and (d / f"lib{PACKAGE}__rosidl_typesupport_fastrtps_c.so").is_file()


def load(prefix: Path | None = None):
    """Import ``roughnet_msgs.srv.Bytes`` (from ``prefix`` if given) with its C libraries loaded, so that
    rmw's dispatch finds the Fast DDS type support by name; returns the ``Bytes`` class."""
    import ctypes

    d = library_dir(prefix)
    for lib in ("rosidl_generator_c", "rosidl_typesupport_fastrtps_c", "rosidl_typesupport_introspection_c",
                "rosidl_typesupport_c", "rosidl_generator_py"):  # fmt: skip
        ctypes.CDLL(str(d / f"lib{PACKAGE}__{lib}.so"), mode=ctypes.RTLD_GLOBAL)
    if prefix is not None and str(prefix) not in sys.path:
        sys.path.insert(0, str(prefix))
    from roughnet_msgs.srv import Bytes  # type: ignore[import-not-found]

    return Bytes


def _generate(src: Path, out: Path) -> None:
    from rosidl_generator_c.cli import GenerateC
    from rosidl_generator_py.cli import GeneratePython
    from rosidl_typesupport_c.cli import GenerateCTypesupport
    from rosidl_typesupport_fastrtps_c.cli import GenerateFastRTPSCTypesupport
    from rosidl_typesupport_introspection_c.cli import GenerateIntrospectionCTypesupport

    share = str(Path(sys.prefix) / "share")
    files = [f"{src}:srv/Bytes.idl"]
    for cls in (GenerateC, GenerateCTypesupport, GenerateFastRTPSCTypesupport, GenerateIntrospectionCTypesupport,
                GeneratePython):  # fmt: skip
        cls(cls.__name__).generate(PACKAGE, files, [share], out / cls.__name__)


def _compile(out: Path, inc_root: Path, dest: Path) -> None:
    import numpy

    v = Path(sys.prefix)
    incs = [f"-I{d}" for d in sorted((v / "include").iterdir()) if d.is_dir()]
    incs += [f"-I{v / 'include'}", f"-I{inc_root}", f"-I{sysconfig.get_paths()['include']}", f"-I{numpy.get_include()}"]
    libs = [f"-L{v / 'lib'}", f"-L{dest}", "-Wl,-rpath,$ORIGIN", f"-Wl,-rpath,{v / 'lib'}"]
    g = out / "GenerateC" / "srv" / "detail"
    units = [
        ("gcc", f"lib{PACKAGE}__rosidl_generator_c.so",
         [g / "bytes__functions.c", g / "bytes__description.c", g / "bytes__type_support.c"],
         ["rosidl_runtime_c", "rcutils", "service_msgs__rosidl_generator_c", "builtin_interfaces__rosidl_generator_c"]),
        ("gcc", f"lib{PACKAGE}__rosidl_typesupport_introspection_c.so",
         [out / "GenerateIntrospectionCTypesupport" / "srv" / "detail" / "bytes__type_support.c"],
         [f"{PACKAGE}__rosidl_generator_c", "rosidl_typesupport_introspection_c",
          "service_msgs__rosidl_typesupport_introspection_c", "rosidl_runtime_c"]),
        ("g++", f"lib{PACKAGE}__rosidl_typesupport_fastrtps_c.so",
         [out / "GenerateFastRTPSCTypesupport" / "srv" / "detail" / "bytes__type_support_c.cpp"],
         [f"{PACKAGE}__rosidl_generator_c", "rosidl_typesupport_fastrtps_c", "fastcdr", "rmw",
          "service_msgs__rosidl_typesupport_fastrtps_c", "service_msgs__rosidl_generator_c", "rosidl_runtime_c",
          "rosidl_dynamic_typesupport"]),
        ("g++", f"lib{PACKAGE}__rosidl_typesupport_c.so",
         [out / "GenerateCTypesupport" / "srv" / "bytes__type_support.cpp"],
         ["rosidl_typesupport_c", f"{PACKAGE}__rosidl_generator_c", "rosidl_runtime_c",
          "service_msgs__rosidl_typesupport_c", "builtin_interfaces__rosidl_typesupport_c"]),
        ("gcc", f"lib{PACKAGE}__rosidl_generator_py.so", [out / "GeneratePython" / "srv" / "_bytes_s.c"],
         [f"{PACKAGE}__rosidl_generator_c", "rosidl_runtime_c", "service_msgs__rosidl_generator_py",
          "service_msgs__rosidl_generator_c"]),
        ("gcc", f"{PACKAGE}_s__rosidl_typesupport_c{sysconfig.get_config_var('EXT_SUFFIX')}",
         [out / "GeneratePython" / f"_{PACKAGE}_s.ep.rosidl_typesupport_c.c"],
         [f"{PACKAGE}__rosidl_generator_py", f"{PACKAGE}__rosidl_typesupport_c", f"{PACKAGE}__rosidl_generator_c",
          "rosidl_runtime_c"]),
    ]  # fmt: skip
    for cc, name, srcs, deps in units:
        cmd = [cc, "-shared", "-fPIC", "-O2", "-w", f"-Wl,-soname,{name}", *incs, "-o", str(dest / name),
               *map(str, srcs), *libs, *(f"-l{d}" for d in deps)]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"typegen: {cc} failed building {name}:\n{r.stderr[-4000:]}")


def build(prefix: Path | None = None) -> Path:
    """Generate and compile the type into ``prefix/roughnet_msgs``; returns that folder."""
    dest = library_dir(prefix)
    os.environ.setdefault("AMENT_PREFIX_PATH", sys.prefix)  # the generators find their templates through it
    with tempfile.TemporaryDirectory(prefix="roughnet-typegen-") as tmp:
        t = Path(tmp)
        (t / "src" / "srv").mkdir(parents=True)
        (t / "src" / "srv" / "Bytes.idl").write_text(IDL)
        out = t / "out"
        _generate(t / "src", out)
        # The generated sources include "roughnet_msgs/srv/...": one include root per generator.
        inc_root = t / "inc"
        inc_root.mkdir()
        stage = t / "stage"
        for gen in ("GenerateC", "GenerateFastRTPSCTypesupport", "GenerateIntrospectionCTypesupport"):
            shutil.copytree(out / gen, stage, dirs_exist_ok=True)
        (inc_root / PACKAGE).symlink_to(stage)
        build_dir = t / "build"
        build_dir.mkdir()
        _compile(out, inc_root, build_dir)
        if dest.exists():
            shutil.rmtree(dest)
        (dest / "srv").mkdir(parents=True)
        (dest / "__init__.py").write_text('"""roughnet_msgs: generated by roughnet.ros2.typegen (make extras)."""\n')
        for f in ("__init__.py", "_bytes.py"):
            shutil.copy(out / "GeneratePython" / "srv" / f, dest / "srv" / f)
        # The type descriptions with their hashes (REP 2011), as a ROS install keeps them in share/.
        for j in sorted((out / "GenerateC" / "srv").glob("*.json")):
            shutil.copy(j, dest / "srv" / j.name)
        for so in build_dir.iterdir():
            shutil.copy(so, dest / so.name)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m roughnet.ros2.typegen", description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix", type=Path, default=None, help="where the roughnet_msgs package goes "
                    "(default: this Python's site-packages)")
    a = ap.parse_args(argv)
    print(f"roughnet_msgs/srv/Bytes built in {build(a.prefix)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
