"""The `irshard` program (and `python -m irshard`): Ctrl-C and SIGTERM are
taken over before anything else is imported, so that an interrupt at any
moment of start-up ends the command as one later would; and the command,
once done, ends its process even where the user's program left a thread
running."""

import sys

# How long a thread still running when the command is done may take to
# end (irshard's own end at once) before the process ends without it.
GRACE_S = 1.0


def main() -> int:
    from irshard.core import interrupts
    interrupts.install()
    from irshard.cli import main as command_line
    return _ended(command_line())


def _ended(code: int) -> int:
    """`code`, once the exit handlers have run and every thread but this
    one has ended. The handlers (`atexit`: the user's program may register
    some) run here, with what they print sent to stderr as the program's
    own prints are (it would follow a report on stdout), and one that
    raises is a note, not a traceback. Where a thread the program started
    is still running after `GRACE_S` (Python would wait for it, the
    command's report written, forever), the process ends here."""
    import threading
    import time
    _exit_handlers()
    main_thread = threading.main_thread()

    def running():
        return [t for t in threading.enumerate()
                if t is not main_thread and not t.daemon and t.is_alive()]

    deadline = time.monotonic() + GRACE_S
    for thread in running():
        thread.join(max(0.0, deadline - time.monotonic()))
    left = running()
    if not left:
        return code
    import os
    names = ", ".join(sorted({t.name for t in left}))
    print(f"irshard: note: the program left {len(left)} thread"
          f"{'s' if len(left) != 1 else ''} running ({names}); the command "
          f"is done, so irshard ends without waiting for "
          f"{'them' if len(left) != 1 else 'it'}", file=sys.stderr)
    _exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code)


def _exit_handlers() -> None:
    """Runs the exit handlers registered so far (each once: they are
    removed as they run), their prints sent to stderr."""
    import atexit
    from irshard.core import files

    def note(unraisable):
        error = unraisable.exc_value
        # The handler itself (Python 3.13 passes no object: its first
        # frame is the handler's).
        tb = unraisable.exc_traceback
        name = getattr(unraisable.object, "__qualname__", None) or (
            tb.tb_frame.f_code.co_qualname if tb is not None else "atexit")
        said = str(error).splitlines()[0] if str(error) else ""
        print(f"irshard: note: the program's exit handler {name} raised "
              f"{type(error).__name__}: {said}", file=files.error_stream())

    hook = sys.unraisablehook
    sys.unraisablehook = note
    files.claim_stdout()
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    finally:
        files.release_stdout()
        sys.unraisablehook = hook


if __name__ == "__main__":
    sys.exit(main())
