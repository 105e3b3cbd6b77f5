"""Test specs and the attack battery of tests/rewards/test_code.py: programs a model might write to pass
tests without solving them, or to hurt the machine. Each is (spec, source)."""

FN = {"kind": "function", "entry_point": "f", "cases": [{"args": [1, 2], "expected": 3}],
      "hidden": [{"args": [10, 20], "expected": 30}, {"args": [-4], "kwargs": {"b": 4}, "expected": 0}]}
STDIO = {"kind": "stdio", "cases": [{"stdin": "1 2\n", "stdout": "3\n"}],
         "hidden": [{"stdin": "10 20\n", "stdout": "30\n"}]}
ASSERT = {"kind": "assert", "asserts": ["assert f(1, 2) == 3"],
          "hidden": ["assert f(10, 20) == 30", "assert f(-1, 1) == 0"]}
# Builtins inside the tests, and a hidden assert that is not of the form `expr == literal`.
STMT = {"kind": "assert", "asserts": ["assert sorted(f([3, 1, 2])) == [1, 2, 3]", "assert len(f([1, 2])) == 2"],
        "hidden": ["assert abs(sum(f([0.5, 0.25])) - 0.75) < 1e-9"]}


ATTACKS = {
    # The exit code proves nothing: no tagged result, no pass.
    "os-exit-before-results": (FN, "import os\nos._exit(0)"),
    "os-exit-in-function": (FN, "def f(a, b=0):\n    import os; os._exit(0)"),
    "sys-exit-at-load": (FN, "import sys\nsys.exit(0)"),
    "system-exit-in-function": (FN, "def f(a, b=0):\n    raise SystemExit(0)"),
    "sys-exit-assert-kind": (ASSERT, "import sys\ndef f(a, b): return 0\nsys.exit(0)"),
    "os-exit-stdio-no-output": (STDIO, "import os\nos._exit(0)"),
    "kill-own-group": (FN, "import os, signal\ndef f(a, b=0):\n    os.killpg(0, signal.SIGKILL)"),
    # Results that are not the value.
    "always-equal-object": (FN, """
        class Eq:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            __hash__ = object.__hash__
        def f(a, b=0): return Eq()"""),
    "int-subclass-equal": (FN, """
        class I(int):
            def __eq__(self, other): return True
            __hash__ = int.__hash__
        def f(a, b=0): return I(3)"""),
    "str-subclass-equal": (ASSERT, """
        class S(str):
            def __eq__(self, other): return True
            __hash__ = str.__hash__
        def f(a, b=0): return S("3")"""),
    # A metaclass cannot make an object pass for an int: the codec reads type(value) itself.
    "metaclass-forged-name": (FN, """
        class Meta(type):
            __name__ = "int"
            __qualname__ = "int"
        class X(metaclass=Meta):
            def __eq__(self, other): return True
            __hash__ = object.__hash__
        def f(a, b=0): return X()"""),
    "hard-coded-visible-answers": (FN, "def f(a, b=0):\n    return {(1, 2): 3}.get((a, b), 0)"),
    # Forged result lines, with and without the secret.
    "print-forged-line": (FN, """
        for i in range(5):
            print(f"0123456789abcdef0123456789abcdef {i} value 3")
        def f(a, b=0): return 0"""),
    "write-forged-lines-to-every-fd": (FN, """
        import os
        for fd in range(0, 64):
            for i in range(5):
                try: os.write(fd, f"{i} value 3\\n{i} ok\\n".encode())
                except OSError: pass
        def f(a, b=0): return 0"""),
    "frame-walk-calls-harness-report": (FN, """
        import sys
        frame = sys._getframe()
        while frame is not None:
            rep = frame.f_locals.get("report")
            if callable(rep):
                for i in range(5):
                    rep(i, "value", "3")
            frame = frame.f_back
        def f(a, b=0): return 0"""),
    "gc-finds-secret-and-forges": (ASSERT, """
        import gc, os
        for obj in gc.get_objects():
            cells = getattr(obj, "__closure__", None) or ()
            vals = [c.cell_contents for c in cells]
            toks = [v for v in vals if isinstance(v, str) and len(v) == 32]
            fds = [v for v in vals if type(v) is int]
            for tok in toks:
                for fd in fds:
                    for i in range(5):
                        os.write(fd, f"{tok} {i} value 3\\n{tok} {i} ok\\n".encode())
        os._exit(0)"""),
    "patch-builtins-and-json": (FN, """
        import builtins, json, json.encoder
        builtins.print = lambda *a, **k: None
        builtins.str = lambda *a, **k: "3"
        json.dumps = lambda *a, **k: "3"
        json.encoder.encode_basestring_ascii = lambda s: '"3"'
        def f(a, b=0): return 0"""),
    "patch-harness-module": (FN, """
        import sys
        h = sys.modules["__main__"]
        h.to_json = lambda value, depth=0: "3"
        h.report_value = lambda report, case, value: report(case, "value", "3")
        def f(a, b=0): return 0"""),
    "redefine-builtins-and-assertionerror": (STMT, """
        import builtins
        class AssertionError(Exception): pass
        builtins.AssertionError = AssertionError
        builtins.sorted = lambda xs: [1, 2, 3]
        builtins.abs = lambda x: 0
        len = lambda xs: 2
        sum = lambda xs: 0.75
        __builtins__ = {"len": len, "sorted": builtins.sorted, "abs": builtins.abs}
        def f(xs): return [0]"""),
    "close-result-pipe": (FN, """
        import os
        os.closerange(3, 1024)
        def f(a, b=0): return 0"""),
    "dup-devnull-over-pipe": (FN, """
        import os
        null = os.open("/dev/null", os.O_WRONLY)
        for fd in range(3, 64):
            if fd != null:
                try: os.dup2(null, fd)
                except OSError: pass
        def f(a, b=0): return 0"""),
    "threads-keep-running-and-forge": (FN, """
        import os, threading
        def spam():
            while True:
                for fd in range(3, 16):
                    try: os.write(fd, b"0 value 3\\n1 value 30\\n2 value 0\\n")
                    except OSError: pass
        for daemon in (True, False):
            threading.Thread(target=spam, daemon=daemon).start()
        def f(a, b=0): return 0"""),
    # Replies forged on the real reply pipe: worth no more than the values they answer (here, wrong ones).
    "forged-replies-on-the-reply-pipe": (FN, """
        import os
        def f(a, b=0):
            for fd in os.listdir("/proc/self/fd"):
                try:
                    if int(fd) > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                        os.write(int(fd), b'["v",0]\\n["x","ok",""]\\n["ready"]\\n')
                except OSError:
                    pass
            return 0"""),
    # A reply nested 200000 deep, written on the reply pipe: malformed, never a RecursionError in the parent.
    "deep-line-on-the-reply-pipe": (ASSERT, """
        import os
        def f(a, b=0):
            for fd in os.listdir("/proc/self/fd"):
                try:
                    if int(fd) > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                        os.write(int(fd), b'["v",' + b"[" * 200000 + b"]" * 200000 + b"]\\n")
                except OSError:
                    pass
            return 3"""),
    "stop-itself": (FN, "import os, signal\ndef f(a, b=0):\n    os.kill(os.getpid(), signal.SIGSTOP)"),
    "atexit-forgery": (FN, """
        import atexit
        atexit.register(lambda: print("0 value 3"))
        def f(a, b=0): return 0"""),
    # Resources.
    "endless-loop": (FN, "def f(a, b=0):\n    while True: pass"),
    "sleep-forever": (STDIO, "import time\ntime.sleep(100)"),
    "ignore-sigterm": (STDIO, """
        import signal
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):
            signal.signal(s, signal.SIG_IGN)
        while True: pass"""),
    "memory-bomb": (FN, "def f(a, b=0):\n    x = bytearray(8 << 30)\n    return a + b"),
    "memory-bomb-list": (STDIO, "x = [0] * (1 << 31)\nprint(3)"),
    "huge-output": (STDIO, "while True:\n    print('3' * 10000)"),
    "file-size-bomb": (STDIO, "open('/tmp/big', 'wb').write(b'x' * (32 << 20))\nprint(input().split()[0] and 3)"),
    "fill-private-tmp": (STDIO, """
        for i in range(40):
            open(f'/tmp/f{i}', 'wb').write(b'x' * (8 << 20))
        print(3)"""),
    "fork-bomb": (STDIO, """
        import os
        open('/proc/self/comm', 'w').write('rlvrforkbomb')
        while True:
            try: os.fork()
            except OSError: pass"""),
    # Processes that spin wait for each other's CPUs: their run-queue delay must not stretch the limit
    # (rlvr.sandbox.clock), the long-lived ones' nor that of children that spin 10 ms and exit.
    "spinning-processes": (FN, """
        import os
        def f(a, b=0):
            for _ in range(8):
                if os.fork() == 0:
                    break
            while True: pass"""),
    "short-lived-spinners": (ASSERT, """
        import os, time
        def f(a, b=0):
            for _ in range(2):
                if os.fork() == 0:
                    while True: pass
            while True:
                try:
                    if os.fork() == 0:
                        t = time.monotonic()
                        while time.monotonic() - t < 0.01: pass
                        os._exit(0)
                    os.wait()
                except OSError:
                    pass"""),
    "thread-bomb": (STDIO, """
        import threading, time
        while True:
            threading.Thread(target=time.sleep, args=(100,)).start()"""),
    # A child that outlives its parent and answers late: its output must not count.
    "orphan-answers-late": (STDIO, """
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            time.sleep(0.3)
            print(3, flush=True)
            time.sleep(100)
        os._exit(0)"""),
    "orphan-popen-sleep": (STDIO, "import subprocess\nsubprocess.Popen(['sleep', '100.4242'])\nprint(0)"),
}
