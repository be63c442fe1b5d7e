"""An init of our own in a confined command's PID namespace, for machines where no cgroup can be made (a container
with a read-only cgroupfs, a user with nothing delegated): it stops and continues every process of the command at
once, and gives the CPU time of every process the command ran.

bubblewrap starts it as the namespace's PID 1 (`--as-pid-1`), so no process of the job can signal, stop or kill it
(the kernel refuses SIGKILL and SIGSTOP to a namespace's init from inside), orphans come to it and it reaps them,
and its end takes every process of the namespace down. It is not dumpable, so no process of the job can open its
descriptors through /proc. It runs the command as its child and answers the runner on two descriptors:
  S  stop every process: kill(-1, SIGSTOP) from PID 1 reaches every process of the namespace in one pass of the
     kernel (a process forking meanwhile cannot escape it); answers `s` once each is seen stopped, `f` if one is not
     within the wait (it is in the kernel: a stop in it takes effect when it leaves)
  C  continue every process (SIGCONT); answers `c`
  K  end the command: every process killed (a timeout, a cancel, a stop that failed), then counted as below
When the command ends, every process still running is killed and reaped, and the last answer is `E <cpu_s>`: the
CPU time (user + system) of every process the command ran, those still running at its end included.

Standard library only, run as a script with `python3 -I -S -c` (its source is given on the command line, so it
needs no file inside the sandbox): nothing of it may import anything but the standard library.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import select
import signal
import sys
import time

PR_SET_DUMPABLE = 4
STOP_WAIT_S = 0.5


def _states() -> dict[int, str]:
    """The state letter of every process of this namespace but this one."""
    out: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            with contextlib.suppress(OSError, IndexError), open(f"/proc/{name}/stat") as fh:
                out[int(name)] = fh.read().rsplit(")", 1)[1].split()[0]
    return out


def _signal_all(signum: int) -> None:
    """`signum` to every process of the namespace but this one (none left: nothing to do)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signum)


def _stop() -> bytes:
    _signal_all(signal.SIGSTOP)
    deadline = time.monotonic() + STOP_WAIT_S
    while True:
        if all(state in "TtZX" for state in _states().values()):
            return b"s"
        if time.monotonic() > deadline:
            return b"f"
        time.sleep(0.0002)


def _reap(child: int) -> int | None:
    """Reap every process that ended; the command's wait status once it has ended."""
    status = None
    with contextlib.suppress(ChildProcessError):  # none left
        while (found := os.waitpid(-1, os.WNOHANG))[0] != 0:  # until none has ended
            if found[0] == child:
                status = found[1]
    return status


def main(argv: list[str]) -> int:
    ctl, reply = int(argv[1]), int(argv[2])
    command = argv[argv.index("--") + 1:]
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    child = os.fork()
    if child == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (ctl, reply, wake_r, wake_w):
            os.close(fd)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            os.write(2, f"autoresearch: cannot run {command[0]}: {exc}\n".encode())
        os._exit(127)
    status = None
    listening = True
    while status is None:
        ready, _, _ = select.select([wake_r, ctl] if listening else [wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
        status = _reap(child)
        if ctl in ready:
            asked = os.read(ctl, 64)
            if not asked:  # the runner is gone: end the command
                listening = False
                _signal_all(signal.SIGKILL)
            for byte in asked:
                if byte == ord("S"):
                    os.write(reply, _stop())
                elif byte == ord("C"):
                    _signal_all(signal.SIGCONT)
                    os.write(reply, b"c")
                elif byte == ord("K"):  # end the command (a timeout, a cancel): every process, then the count
                    _signal_all(signal.SIGKILL)
    for _ in range(100):  # what the command left running ends with it; each process is reaped here
        _signal_all(signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, 0)[0]:
                pass
        if not _states():
            break
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    with contextlib.suppress(OSError):
        os.write(reply, f"E {usage.ru_utime + usage.ru_stime:.6f}\n".encode())
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
