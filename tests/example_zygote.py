"""A fork server for the docs examples' Python processes (tests/test_docs_examples.py).

Every example is a new process, and every `python` or `vanilla-transformer` a shell example starts is one more. A new
interpreter spends most of its seconds importing torch and transformers before it does anything an example shows;
with many examples this dominated the suite. So the examples' `python` is this module's client: it hands its command
line, working folder, environment and its three standard streams (the file descriptors themselves) to a server that
imported those libraries once, and the server forks a child that runs the command as `python` would
(a script, `-m module` or `-c code`, with `sys.argv`, `sys.path[0]` and `__main__` as the interpreter sets them),
writing straight to the client's streams. The client waits for it and exits with its status; a signal sent to the
client (Ctrl-C, `kill`, `timeout`) is passed on to the child.

Only what a fresh interpreter would do identically is forked: a child whose environment differs from the server's (a
variable set for one command, such as `HF_HUB_OFFLINE=0 python ...`, could change what an import reads) or whose
command line has interpreter options (`-u`, `-W`, `-X`, ...) replaces itself with a real `python` (exec) instead. The
server starts only if importing the libraries printed no warning and started no thread (a warning printed once at
import would otherwise be missing from every example, and a thread would be missing from the forked child); if not,
the examples run in new interpreters as before. Set VT_EXAMPLES_FRESH_INTERPRETERS=1 to run them that way always.

Run as `python example_zygote.py serve SOCKET READY_FILE` (the server) or `python -S -E example_zygote.py run
SOCKET ARGS...` (the client: no site, no environment options, so it starts in milliseconds).
"""

import json
import os
import signal
import socket
import struct
import sys

# Environment variables a shell sets on its own (or the examples' warning recorder sets per example), which no import
# reads: a child whose environment differs from the server's in these only is still forked.
HARMLESS_VARIABLES = {"PWD", "OLDPWD", "SHLVL", "_", "VT_EXAMPLE_WARNINGS", "VT_EXAMPLE_ZYGOTE_DEBUG", "COLUMNS", "LINES",
                      "PS1", "PS2", "PS4"}
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# The libraries, not this package: importing it registers the model with transformers, which an example must do
# (or not) itself, as in a new interpreter.
IMPORTED_ONCE = ("torch", "transformers", "transformers.modeling_utils", "transformers.generation",
                 "transformers.pipelines", "transformers.trainer", "datasets", "accelerate", "tokenizers")


def _send(connection: socket.socket, message: dict, fds=()) -> None:
    data = json.dumps(message).encode()
    data = struct.pack("!I", len(data)) + data
    if fds:  # the descriptors travel with the message's first bytes
        sent = socket.send_fds(connection, [data], list(fds))
        data = data[sent:]
    connection.sendall(data)


def _receive_exactly(connection: socket.socket, size: int, data: bytes = b"") -> bytes | None:
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _receive(connection: socket.socket, with_fds: int = 0):
    """One message (with `with_fds`: and the file descriptors sent with it); None when the other side closed."""
    fds, data = [], b""
    if with_fds:
        data, fds, _flags, _address = socket.recv_fds(connection, 4, with_fds)
        if not data:
            return None
    header = _receive_exactly(connection, 4, data)
    body = header and _receive_exactly(connection, struct.unpack("!I", header)[0])
    if body is None:
        for fd in fds:
            os.close(fd)
        return None
    message = json.loads(body)
    return (message, fds) if with_fds else message


# ---------------------------------------------------------------------------------------------------------------
# the client: the examples' `python`


def run_client(socket_path: str, argv: list[str]) -> None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(socket_path)
    _send(connection, {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}, fds=(0, 1, 2))

    def forward(signum, _frame):
        _send(connection, {"signal": signum})

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    reply = _receive(connection)
    if reply is None:
        sys.stderr.write("example_zygote: the fork server closed the connection\n")
        os._exit(1)
    if reply.get("signal"):  # killed by a signal: die of it too, so the caller sees what it would have seen
        signal.signal(reply["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), reply["signal"])
    os._exit(reply["code"])


# ---------------------------------------------------------------------------------------------------------------
# the server


def _exec_real_python(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, *argv])


def _run_like_python(argv: list[str]) -> int:
    """Run `python ARGV` in this (forked) process as the interpreter would run it; returns the exit status."""
    import runpy
    import threading
    import types

    if not argv or argv[0] == "-" or (argv[0].startswith("-") and argv[0] not in ("-c", "-m")) or (
            argv[0] in ("-c", "-m") and len(argv) < 2):
        _exec_real_python(argv)  # interactive, stdin, or interpreter options: a real interpreter
    code = 0
    try:
        try:
            if argv[0] == "-m":
                sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's path in argv[0]
                sys.path[0] = os.getcwd()
                runpy._run_module_as_main(argv[1], alter_argv=True)
            else:
                main = types.ModuleType("__main__")
                main.__dict__["__builtins__"] = __builtins__
                if argv[0] == "-c":
                    sys.argv = ["-c", *argv[2:]]
                    sys.path[0] = ""
                    source, filename = argv[1], "<string>"
                else:
                    sys.argv = list(argv)
                    sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))
                    filename = argv[0]
                    try:
                        with open(filename, "rb") as file:
                            source = file.read()
                    except OSError as error:
                        sys.stderr.write(f"{sys.executable}: can't open file {filename!r}: [Errno {error.errno}] "
                                         f"{error.strerror}\n")
                        return 2
                    main.__file__ = filename
                sys.modules["__main__"] = main
                exec(compile(source, filename, "exec"), main.__dict__)
        finally:
            threading._shutdown()  # as at the interpreter's exit: wait for the threads the program left running
    except SystemExit as exit:
        if exit.code is None:
            code = 0
        elif isinstance(exit.code, int):
            code = exit.code
        else:
            sys.stderr.write(f"{exit.code}\n")
            code = 1
    except BaseException as error:  # the traceback from the program's own frames on, as the interpreter prints it
        traceback_ = error.__traceback__
        while traceback_ is not None and traceback_.tb_frame.f_code.co_filename == __file__:
            traceback_ = traceback_.tb_next
        sys.excepthook(type(error), error.with_traceback(traceback_), traceback_)
        if isinstance(error, KeyboardInterrupt):  # the interpreter then ends by the signal itself
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        code = 1
    return code


def _child(request: dict, fds: list[int], listener: socket.socket, connections) -> None:
    """In the forked child: become the client's `python` and run its command; never returns."""
    code = 1
    try:
        listener.close()
        for connection in connections:
            connection.close()
        os.setpgid(0, 0)  # its own group: a signal for it reaches the processes it starts as well
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        env = request["env"]
        different = {name for name in set(env) ^ set(STARTED_WITH) | {
            name for name in env if STARTED_WITH.get(name) != env[name]}} - HARMLESS_VARIABLES
        # a process an example's Python process started inherits what the imports set: the same value is no change
        different = {name for name in different if name not in SET_BY_IMPORTS or env.get(name) != SET_BY_IMPORTS[name]}
        os.environ.clear()
        os.environ.update(env)
        os.environ.update(SET_BY_IMPORTS)  # as the imports would set them in a fresh interpreter
        if different:
            if os.environ.get("VT_EXAMPLE_ZYGOTE_DEBUG"):
                sys.stderr.write(f"example_zygote: a new interpreter: the environment differs in {sorted(different)}\n")
            _exec_real_python(request["argv"])
        import random

        random.seed()  # a fresh interpreter's generators start from the system's entropy (torch's seed is fixed)
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        code = _run_like_python(request["argv"])
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


STARTED_WITH = dict(os.environ)  # the server's environment before its imports: a child's must be the same
SET_BY_IMPORTS: dict = {}  # what the imports added to the environment (torch sets TORCHINDUCTOR_CACHE_DIR)


def serve(socket_path: str, ready_file: str) -> None:
    """Import the libraries, check that doing so printed nothing, started no thread and imported nothing of this
    package, then fork a child for each client until stdin closes (the test process ends)."""
    import importlib
    import selectors
    import threading

    for name in IMPORTED_ONCE:
        importlib.import_module(name)
    # the examples' warning recorder (their sitecustomize) wrote what the imports printed, if anything
    printed = os.environ.get("VT_EXAMPLE_WARNINGS")
    problems = [] if not printed or not os.path.exists(printed) else open(printed, encoding="utf-8").read().split("\n")
    problems = [line for line in problems if line]
    if threading.active_count() > 1:
        problems.append(f"threads started at import: {threading.enumerate()}")
    if "vanilla_transformer" in sys.modules:
        problems.append("the imports imported vanilla_transformer (which registers the model)")
    SET_BY_IMPORTS.update({name: value for name, value in os.environ.items() if STARTED_WITH.get(name) != value})
    if set(STARTED_WITH) - set(os.environ):
        problems.append(f"the imports removed {sorted(set(STARTED_WITH) - set(os.environ))} from the environment")
    if problems:
        with open(ready_file + ".tmp", "w", encoding="utf-8") as file:
            json.dump({"problems": problems}, file)
        os.replace(ready_file + ".tmp", ready_file)
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    with open(ready_file + ".tmp", "w", encoding="utf-8") as file:
        json.dump({"problems": []}, file)
    os.replace(ready_file + ".tmp", ready_file)

    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
    children = {}  # pid -> connection
    by_connection = {}  # connection -> pid
    while True:
        for key, _events in selector.select(timeout=0.02):
            if key.data == "stdin":
                if not os.read(sys.stdin.fileno(), 4096):  # the test process closed it: stop, and stop every child
                    for pid in children:
                        _kill_group(pid, signal.SIGKILL)
                    return
            elif key.data == "accept":
                connection, _ = listener.accept()
                received = _receive(connection, with_fds=3)
                if received is None:
                    connection.close()
                    continue
                request, fds = received
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(request, fds, listener, [*by_connection, connection])
                for fd in fds:
                    os.close(fd)
                children[pid] = connection
                by_connection[connection] = pid
                selector.register(connection, selectors.EVENT_READ, "client")
            else:  # a client forwards a signal, or closed (it was killed): pass it on to its child
                connection = key.fileobj
                message = _receive(connection)
                pid = by_connection.get(connection)
                if pid is not None:
                    _kill_group(pid, message["signal"] if message else signal.SIGKILL)
                if message is None:
                    selector.unregister(connection)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = children.pop(pid, None)
            if connection is None:
                continue
            by_connection.pop(connection, None)
            reply = {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {"code": os.WEXITSTATUS(status)}
            try:
                _send(connection, reply)
            except OSError:
                pass
            try:
                selector.unregister(connection)
            except KeyError:
                pass
            connection.close()


def _kill_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3])
    else:
        run_client(sys.argv[2], sys.argv[3:])
