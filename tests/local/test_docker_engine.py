"""scripts/docker-engine.sh keeps the engine loopback-only: an engine that already
answers is used only when it has no bridge network, and installing docker.io never lets
the packaged service start its own engine (bridge, iptables rules, IP forwarding).

An engine with a bridge cannot be run here without opening the host, so the refusal is
shown with a docker client that reports one; the install is shown through the script's
own functions (sourced), with apt-get and systemctl standing in as shell functions that
record what the packages' postinst would be allowed to do."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "docker-engine.sh"


def _client_reporting(tmp_path: Path, drivers: list[str]) -> dict[str, str]:
    """PATH with a docker client whose engine answers and lists networks with these
    drivers (dockerd and docker-compose present, so nothing is installed)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    listing = "\\n".join(drivers)
    (bin_dir / "docker").write_text(
        f'#!/bin/sh\ncase "$1" in info) exit 0 ;; network) printf "{listing}\\n" ;;'
        f' *) exit 2 ;; esac\n')
    for name in ("dockerd", "docker-compose"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 99\n")
    for exe in bin_dir.iterdir():
        exe.chmod(0o755)
    return dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                OFFSET_JOURNAL_DOCKER_STATE=str(tmp_path / "state"))


def test_an_answering_engine_with_a_bridge_is_refused_in_one_line(tmp_path):
    env = _client_reporting(tmp_path, ["bridge", "host", "null"])
    out = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1
    assert out.stderr.startswith("docker engine: the engine that answers has a bridge network")
    assert not (tmp_path / "state" / "dockerd.pid").exists()  # and none was started


def test_an_answering_engine_without_a_bridge_is_used(tmp_path):
    env = _client_reporting(tmp_path, ["host", "null"])
    out = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == \
        (0, "docker engine: already answering, no bridge\n", "")


KEPT_POLICY = "#!/bin/sh\n# the host's own\nexit 0\n"


def _install(tmp_path: Path, *, systemd: bool, apt_fails: bool = False,
             killed_before: bool = False) -> subprocess.CompletedProcess[str]:
    """Source the script and run its install_packages with apt-get and systemctl as shell
    functions: apt-get asks the policy, as invoke-rc.d does, whether docker may start.
    ``killed_before``: a run killed mid-install left the host's policy aside and its own
    deny file in place."""
    policy = tmp_path / "policy-rc.d"
    policy.write_text(KEPT_POLICY)
    policy.chmod(0o755)
    if killed_before:
        policy.rename(tmp_path / "policy-rc.d.offset-journal-kept")
        policy.write_text("#!/bin/sh\n# scripts/docker-engine.sh: no service starts\nexit 101\n")
        policy.chmod(0o755)
    systemd_dir = tmp_path / "run-systemd-system"
    if systemd:
        systemd_dir.mkdir()
    code = f"""
        source {SCRIPT}
        systemctl() {{ echo "systemctl $*"; }}
        apt-get() {{
            if [ "$1" = install ]; then
                "{policy}" docker start && echo "docker start: allowed" \\
                    || echo "docker start: denied ($?)"
                {"return 100" if apt_fails else "echo installed"}
            fi
        }}
        install_packages "{policy}" "{systemd_dir}" docker.io docker-compose
        echo done
    """
    return subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60)


def test_installing_docker_io_never_starts_the_packaged_engine(tmp_path):
    out = _install(tmp_path, systemd=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "systemctl mask docker.service docker.socket",
        "docker start: denied (101)",
        "installed",
        "done",
    ]
    # the host's own policy-rc.d is back, and nothing of ours is left
    assert (tmp_path / "policy-rc.d").read_text() == KEPT_POLICY
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy-rc.d", "run-systemd-system"]


def test_without_systemd_nothing_is_masked_and_a_failed_install_restores_the_policy(tmp_path):
    out = _install(tmp_path, systemd=False, apt_fails=True)
    assert out.returncode == 100
    assert out.stdout.splitlines() == ["docker start: denied (101)"]
    assert (tmp_path / "policy-rc.d").read_text() == KEPT_POLICY
    assert [p.name for p in tmp_path.iterdir()] == ["policy-rc.d"]


def test_a_run_killed_mid_install_leaves_the_hosts_policy_to_the_next_run(tmp_path):
    out = _install(tmp_path, systemd=False, killed_before=True)
    assert out.returncode == 0, out.stderr
    assert "docker start: denied (101)" in out.stdout
    assert (tmp_path / "policy-rc.d").read_text() == KEPT_POLICY
    assert [p.name for p in tmp_path.iterdir()] == ["policy-rc.d"]
