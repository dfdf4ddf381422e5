"""offset-journal's state-restore helper, shipped prebuilt: one jar per Spark minor.

The helper (``jvm/state-restore``, Java) calls Spark's internal state classes, which
change between minors (4.3 dropped ``CommitLog.defaultVersion()``), so it is compiled
once per minor: the sources every minor shares (``src/main/java``) with that minor's
few differing lines (``src/spark-<minor>/java``), by ``javac`` alone against that
PySpark's own jars (``pyspark/jars`` or ``$SPARK_HOME/jars``): no ``spark-sql`` from
Maven, no Maven at all. The package carries the jars
(``offset_journal/_jars/state-restore-spark<minor>.jar``), so a driver without a JDK,
Maven or a network restores: ``spark.jars`` names the shipped file, and Spark hands it
to the executors, where ``EncodeRows`` runs in tasks.

**Keeping the committed jars honest.** Each jar's manifest records the SHA-256 of the
sources it was compiled from (``Source-SHA-256``), the minor and the PySpark it was
compiled against, and the javac. tests/state/test_state_helper.py checks the digest against
the sources in the repository (a source changed and the jar not rebuilt fails there) and
rebuilds the jar against the installed PySpark, comparing every class byte for byte:
javac's output depends only on the sources, the class path, ``--release`` and the
flags, not on the time or the order of the files, and the jar's entries carry a fixed
time and order, so one build equals another.

Each jar also lists the Spark classes its classes name (``spark-classes.txt``, read
from the compiled classes' constant pools): the helper's ``Probe`` loads them before
anything is written, so a runtime whose internals differ is refused naming the class.

Rebuilding is a developer's step, never a run-time one: ``scripts/build-state-restore.py``
(with the Python of a venv holding the PySpark of that minor).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from ..errors import JarsError
from ..spark_version import Minor, minor_text, parse, problem, spec

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "_jars"
"""Where the package keeps the prebuilt jars (``offset_journal/_jars``)."""
PACKAGE_DIR = "io/offsetjournal/state"
CLASS_LIST = f"{PACKAGE_DIR}/spark-classes.txt"
JAVA_RELEASE = "17"
#: javac's flags: the class files' format (Java 17, what Spark 4 runs on), the sources'
#: encoding; line numbers and source file names stay (javac's default) for stack traces.
JAVAC_FLAGS = ("--release", JAVA_RELEASE, "-encoding", "UTF-8", "-nowarn", "-Xlint:none")
_FIXED_TIME = (2000, 1, 1, 0, 0, 0)  # every zip entry's time: the jar does not vary by it
_JAR_NAME = re.compile(r"state-restore(?:-spark(\d+)\.(\d+))?\.jar")


def jar_name(line: Minor) -> str:
    """``state-restore-spark4.2.jar``."""
    return f"state-restore-spark{minor_text(line)}.jar"


def is_helper_jar(path: str) -> bool:
    """The path names a state-restore helper jar (this package's, or one built before
    the jars were shipped: ``state-restore.jar``)."""
    return _JAR_NAME.fullmatch(Path(path).name) is not None


def sources_dir() -> Path:
    """``jvm/state-restore/src``: the repository's, or the copy a wheel carries."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_jvm", package.parent / "jvm"):
        found = candidate / "state-restore" / "src"
        if (found / "main" / "java").is_dir():
            return found
    raise JarsError("the state-restore helper's sources (jvm/state-restore/src) are not here")


def source_lines() -> tuple[Minor, ...]:
    """The Spark minors the sources have a part of their own for (``src/spark-4.2``)."""
    found = []
    for path in sources_dir().glob("spark-*"):
        match = re.fullmatch(r"spark-(\d+)\.(\d+)", path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), int(match.group(2))))
    return tuple(sorted(found))


def shipped_lines() -> tuple[Minor, ...]:
    """The Spark minors this package carries a helper jar for."""
    found = []
    for path in SHIPPED_DIR.glob("state-restore-spark*.jar"):
        match = _JAR_NAME.fullmatch(path.name)
        if match and match.group(1):
            found.append((int(match.group(1)), int(match.group(2))))
    return tuple(sorted(found))


def sources(line: Minor) -> list[tuple[str, Path]]:
    """The Java files compiled for ``line``, each with its path under ``src/``, in a
    fixed order: the shared ones and that minor's own."""
    root = sources_dir()
    own = root / f"spark-{minor_text(line)}"
    if not own.is_dir():
        raise JarsError(f"the state-restore helper has no sources for Spark "
                        f"{minor_text(line)} (it has {_lines_text(source_lines())})")
    files = [*(root / "main").rglob("*.java"), *own.rglob("*.java")]
    return sorted((p.relative_to(root).as_posix(), p) for p in files)


def source_digest(line: Minor) -> str:
    """The SHA-256 of the sources compiled for ``line``: each file's path and bytes."""
    hashed = hashlib.sha256()
    for name, path in sources(line):
        data = path.read_bytes()
        hashed.update(f"{name}\0{len(data)}\0".encode())
        hashed.update(data)
    return hashed.hexdigest()


def shipped_jar(version: str) -> Path:
    """The shipped helper jar for Spark ``version`` (any patch of its minor, a vendor's
    build of one). JarsError (one line) on a Spark the restore does not run on, saying
    what it offers instead."""
    running = parse(version)
    refused = problem("state-restore", running)
    if refused is not None:
        raise JarsError(f"no state-restore helper for Spark {running.raw}: {refused}")
    path = SHIPPED_DIR / jar_name(running.line)
    if not path.is_file():
        raise JarsError(f"offset-journal's state-restore helper for Spark "
                        f"{minor_text(running.line)} is missing from {SHIPPED_DIR}: "
                        "reinstall offset-journal")
    return path


def read_manifest(jar: Path) -> dict[str, str]:
    """The main section of a jar's ``META-INF/MANIFEST.MF`` (continuation lines joined)."""
    with zipfile.ZipFile(jar) as zf:
        text = zf.read("META-INF/MANIFEST.MF").decode("utf-8")
    out: dict[str, str] = {}
    key = None
    for raw in text.replace("\r\n", "\n").split("\n"):
        if not raw:
            if out:
                break  # the main section ends at the first blank line
            continue
        if raw.startswith(" ") and key is not None:
            out[key] += raw[1:]
        elif ": " in raw:
            key, value = raw.split(": ", 1)
            out[key] = value
    return out


def class_files(jar: Path) -> dict[str, bytes]:
    """Every entry of a jar but its manifest, by name: what a rebuild must equal."""
    with zipfile.ZipFile(jar) as zf:
        return {n: zf.read(n) for n in zf.namelist()
                if not n.endswith("/") and n != "META-INF/MANIFEST.MF"}


def spark_version_of(jars_dir: Path) -> str:
    """The Spark release whose jars ``jars_dir`` holds (``spark-core_2.13-4.2.0.jar``)."""
    found = sorted(jars_dir.glob("spark-core_*.jar"))
    if not found:
        raise JarsError(f"no spark-core jar in {jars_dir}: not a Spark's jars directory")
    return re.sub(r"^spark-core_[0-9.]+-", "", found[0].name).removesuffix(".jar")


def javac_version(javac: str) -> str:
    """``17.0.15`` for the javac given."""
    done = subprocess.run([javac, "-version"], capture_output=True, text=True, timeout=60)
    return (done.stdout or done.stderr).strip().removeprefix("javac ").strip()


def find_javac() -> str:
    """``$JAVA_HOME/bin/javac``, else the one on PATH: a JDK, needed only to rebuild."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").is_file():
        return str(Path(home) / "bin" / "javac")
    found = shutil.which("javac")
    if found is None:
        raise JarsError("javac is not installed: rebuilding the helper needs a JDK 17 or "
                        "later (apt-get install openjdk-17-jdk-headless)")
    return found


def build(jars_dir: Path, out_dir: Path, javac: str | None = None) -> Path:
    """Compile the helper for the Spark whose jars ``jars_dir`` holds, against them, and
    write its jar into ``out_dir`` (returned). JarsError (one line) when javac fails."""
    spark = spark_version_of(jars_dir)
    line = parse(spark).line
    proven = spec("state-restore").only
    if line not in proven:  # the one list of minors: spark_version's, the gate's too
        raise JarsError(f"the state-restore helper is proven on Spark "
                        f"{_lines_text(proven)}, not {minor_text(line)}: add the minor to "
                        "the state-restore feature in offset_journal/spark_version.py (and "
                        f"its sources, src/spark-{minor_text(line)}) once it is proven there")
    compiler = javac or find_javac()
    with tempfile.TemporaryDirectory(prefix="state-restore-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        cmd = [compiler, *JAVAC_FLAGS, "-cp", str(jars_dir / "*"), "-d", str(classes),
               *(str(p) for _n, p in sources(line))]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            errors = [ln for ln in done.stderr.splitlines() if ": error: " in ln]
            raise JarsError(f"javac could not compile the state-restore helper against Spark "
                            f"{spark}: {(errors or done.stderr.splitlines() or ['?'])[0]}")
        entries = {p.relative_to(classes).as_posix(): p.read_bytes()
                   for p in sorted(classes.rglob("*.class"))}
    entries[CLASS_LIST] = ("\n".join(spark_classes(entries.values())) + "\n").encode()
    manifest = {"Manifest-Version": "1.0",
                "Created-By": "offset-journal scripts/build-state-restore.py",
                "Spark-Line": minor_text(line), "Spark-Compiled-Against": spark,
                "Javac": javac_version(compiler), "Javac-Release": JAVA_RELEASE,
                "Source-SHA-256": source_digest(line)}
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / jar_name(line)
    write_jar(target, manifest, entries)
    return target


def write_jar(target: Path, manifest: dict[str, str], entries: dict[str, bytes]) -> None:
    """A jar whose bytes depend on its contents alone: the manifest first, then every
    entry by name, each with the same fixed time."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in [("META-INF/MANIFEST.MF", manifest_text(manifest).encode()),
                           *sorted(entries.items())]:
            info = zipfile.ZipInfo(name, _FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    target.write_bytes(buffer.getvalue())


def manifest_text(fields: dict[str, str]) -> str:
    """A manifest's main section: lines of at most 72 bytes, longer values continued on
    lines that start with a space (the JAR format's rule)."""
    lines = []
    for key, value in fields.items():
        text = f"{key}: {value}"
        lines.append(text[:72])
        lines += [" " + text[i:i + 71] for i in range(72, len(text), 71)]
    return "\r\n".join(lines) + "\r\n\r\n"


def spark_classes(classes: Iterable[bytes]) -> list[str]:
    """The Spark classes (``org.apache.spark.*``) the given class files name: the
    classes they refer to and the types in their descriptors, sorted."""
    found: set[str] = set()
    for data in classes:
        for text in _constant_strings(data):
            for name in re.findall(r"(?:^|L|\[)(org/apache/spark/[\w/$]+)", text):
                found.add(name.replace("/", "."))
    return sorted(found)


def _constant_strings(data: bytes) -> list[str]:
    """The UTF-8 constants of a class file's constant pool (class names and
    descriptors among them)."""
    count = struct.unpack_from(">H", data, 8)[0]
    pos, index, out = 10, 1, []
    sizes = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2,
             17: 4, 18: 4, 19: 2, 20: 2}
    while index < count:
        tag = data[pos]
        if tag == 1:
            length = struct.unpack_from(">H", data, pos + 1)[0]
            out.append(data[pos + 3:pos + 3 + length].decode("utf-8", "replace"))
            pos += 3 + length
        elif tag in sizes:
            pos += 1 + sizes[tag]
        else:
            raise JarsError(f"not a class file this reader knows (constant tag {tag})")
        index += 2 if tag in (5, 6) else 1
    return out


def _lines_text(lines: tuple[Minor, ...]) -> str:
    return ", ".join(minor_text(m) for m in lines) or "none"
