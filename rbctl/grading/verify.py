"""The one grader of rbctl: training rewards and evaluation both call `grade`.

Contract
1. The answer of a completion is found by the extraction policy of `rbctl.grading.extract`
   (docs/method.md, "Answer extraction"): its LAST box, else a final-answer phrase; an unclosed
   last box (a truncated generation) is no answer. ``GradeResult.extraction`` records which.
2. Numbers written with thousands separators (``12\\,345``, ``1 000``, ``1{,}000``) are first read
   as one number in both answers (`join_digit_groups`). The extracted answer and the gold answer
   are then both parsed by math-verify (each wrapped in ``\\boxed{}`` so that a bare gold string
   such as ``025`` or ``336^\\circ`` goes through the same LaTeX path as a model answer) and
   compared with ``math_verify.verify(gold, pred)``. math-verify supplies: fractions vs decimals,
   ``\\dfrac``, leading zeros, ``^\\circ``, ``x = 5`` vs ``5``, intervals, percentages, ``\\sqrt``, ``\\pi``.
   One rule of ours first: where the gold is a plain number, an answer that is a computation left
   undone (``40 + 32`` for 72, which math-verify would evaluate) is wrong, status ``unevaluated``
   (`rbctl.grading.extract.unevaluated_computation`).
3. Multiple-choice letters: math-verify compares ``B``, ``(B)``, ``\\text{(B)}`` as the symbol
   ``b``. One addition of ours: when the gold is a single letter A-E, a prediction that starts with
   a parenthesised letter (``\\textbf{(B) }12``, the AMC style) is reduced to that letter.
4. Hard time limit: math-verify's own timeout uses ``signal.alarm``, which works only in the main
   thread and cannot interrupt C code (Python's big-integer ``pow`` in ``9^{9^{9}}`` never
   returns to the interpreter). So the comparison runs in a persistent worker subprocess
   (one per concurrently grading thread, reused across calls); on time-out the worker is killed
   with SIGKILL and a fresh one is started for the next call. Worker start-up (about 0.5 s) is not
   charged to the call's time budget. Before anything reaches sympy, cheap pre-checks reject
   answers that could not finish anyway (longer than 1000 characters, braces nested deeper than
   50, numeric power towers or factorials with more than 10^6 digits); they are reported as
   ``timeout`` with the reason in ``detail``. Each worker also runs under a memory limit
   (``RLIMIT_AS``, WORKER_MEMORY_LIMIT_BYTES): an answer that makes sympy build a huge expression
   gets a MemoryError in the worker, not the machine's memory; the call reports ``error`` and the
   worker is replaced.
5. A time-out, a worker crash, running out of memory or a math-verify exception counts as NOT correct and is reported in
   ``GradeResult.status`` (``timeout`` / ``error``) so evaluation can count them. There is no
   catch-all fallback to string comparison.

Linux/macOS only (the worker is read with ``select`` on a pipe).
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from functools import lru_cache
from pathlib import Path

from rbctl.grading.extract import (  # noqa: F401  (re-exported: the grading API)
    EXTRACTIONS, MAX_ANSWER_CHARS, STATUSES, GradeResult, _CHOICE_PRED, _strip_text_commands, choice_letter,
    extract_boxed, extract_final_answer, join_digit_groups, precheck, unevaluated_computation,
)

WORKER_STARTUP_TIMEOUT_S = 120.0  # importing sympy on a loaded 2-core machine can take a while
WORKER_MEMORY_LIMIT_BYTES = 4 << 30  # RLIMIT_AS: a runaway sympy expansion raises MemoryError, not an OOM kill
OUT_OF_MEMORY = "grading worker ran out of memory"

# ---------------------------------------------------------------------------------------------
# Worker subprocess: runs math-verify; the parent enforces the time limit by killing it
# ---------------------------------------------------------------------------------------------

_HEADER = struct.Struct("<I")


def _write_msg(fd: int, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    payload = _HEADER.pack(len(data)) + data
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    """Read n bytes from fd; None on EOF. Raises TimeoutError when ``deadline`` passes."""
    chunks = []
    while n > 0:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                raise TimeoutError
        chunk = os.read(fd, n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read_msg(fd: int, deadline: float | None) -> object | None:
    header = _read_exact(fd, _HEADER.size, deadline)
    if header is None:
        return None
    body = _read_exact(fd, _HEADER.unpack(header)[0], deadline)
    return None if body is None else pickle.loads(body)


def _worker_main() -> None:  # pragma: no cover - runs in the subprocess
    """Serve requests ``(op, a, b, timeout_s)`` from stdin; reply ``(status, correct, detail)``."""
    proto_in, proto_out = 0, os.dup(1)
    os.dup2(2, 1)  # stray prints from sympy must not corrupt the protocol on stdout
    sys.stdout = sys.stderr
    # Ctrl-C is the parent's to handle (it kills us at exit); a traceback from here is noise.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_LIMIT_BYTES, resource.RLIM_INFINITY))
    except (ImportError, ValueError, OSError):
        pass  # the limit is a safeguard, not needed for correctness
    import logging

    import math_verify  # noqa: F401  (import cost paid before the "ready" message)

    # We pass timeouts of None to math-verify (the parent enforces the limit); silence its
    # warning that then says "you must provide the logic for timeout interruption yourself".
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    _compare("grade", "1", "1")  # warm up sympy and latex2sympy caches
    _write_msg(proto_out, ("ready", os.getpid()))
    while True:
        req = _read_msg(proto_in, None)
        if req is None:
            return  # parent closed the pipe
        op, a, b, timeout_s = req
        _arm_cpu_backstop(timeout_s)
        try:
            reply = _allocate(int(a)) if op == "allocate" else _compare(op, a, b)
        except MemoryError:  # RLIMIT_AS refused an allocation: a grader error, and the parent replaces us
            reply = ("error", False, f"{OUT_OF_MEMORY} (limit {WORKER_MEMORY_LIMIT_BYTES >> 20} MiB)")
        except Exception as exc:  # reported to the caller as status "error", never as a verdict
            reply = ("error", False, f"{type(exc).__name__}: {str(exc)[:300]}")
        _write_msg(proto_out, reply)


def _allocate(n: int) -> tuple[str, bool, str]:  # pragma: no cover - runs in the subprocess
    """The memory limit's self-test (op "allocate"): build and touch n bytes."""
    data = b"\x01" * n
    return "ok", False, f"allocated {len(data)} bytes"


def _arm_cpu_backstop(timeout_s: float) -> None:  # pragma: no cover - runs in the subprocess
    """Let the kernel kill this worker (SIGXCPU) if a job overruns by far.

    The parent kills a timed-out worker itself; this only matters if the parent died first, so
    that an orphaned worker stuck in ``9^{9^{9}}`` does not spin forever.
    """
    try:
        import resource

        used = resource.getrusage(resource.RUSAGE_SELF)
        cpu = used.ru_utime + used.ru_stime
        resource.setrlimit(resource.RLIMIT_CPU, (int(cpu + timeout_s) + 30, resource.RLIM_INFINITY))
    except (ImportError, ValueError, OSError):
        pass


@lru_cache(maxsize=4096)
def _parse(answer: str) -> tuple:  # pragma: no cover - runs in the subprocess
    """math-verify parse of a bare answer; cached because GRPO grades G samples per gold."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    return tuple(
        parse("\\boxed{" + answer + "}", extraction_config=config, parsing_timeout=None, raise_on_error=True)
    )


def _verify_any(gold: tuple, pred: tuple) -> tuple[bool, str]:  # pragma: no cover - subprocess
    """math-verify over all (gold, pred) parse pairs; returns (equal, first error or "")."""
    from math_verify import verify

    first_error = ""
    for g in gold:
        for p in pred:
            try:
                if verify(g, p, timeout_seconds=None, raise_on_error=True):
                    return True, ""
            except MemoryError:
                raise  # the worker's memory limit: reported as such, and the worker is replaced
            except Exception as exc:  # one pair failing must not hide another pair that matches
                first_error = first_error or f"{type(exc).__name__}: {str(exc)[:300]}"
    return False, first_error


def _compare(op: str, a: str, b: str) -> tuple[str, bool, str]:  # pragma: no cover - subprocess
    """``grade``: a = gold, b = prediction. ``equiv``: equal in either direction."""
    pa, pb = _parse(a), _parse(b)
    if op == "grade":
        if not pa:
            return "error", False, f"gold answer {a[:80]!r} did not parse"
        if not pb:
            return "ok", False, "prediction did not parse"
        equal, err = _verify_any(pa, pb)
    else:
        if not pa or not pb:
            return "ok", False, "an answer did not parse"
        equal, err = _verify_any(pa, pb)
        if not equal:
            # math-verify is asymmetric (gold `5` matches `x=5`); votes must not depend on order.
            equal, err2 = _verify_any(pb, pa)
            err = err or err2
    if equal:
        return "ok", True, ""
    if err:
        return "error", False, err
    return "ok", False, ""


class _Worker:
    """One grading subprocess. Used by one thread at a time (the pool hands it out)."""

    def __init__(self) -> None:
        package_parent = str(Path(__file__).resolve().parents[2])
        code = "import sys; sys.path.insert(0, sys.argv[1]); from rbctl.grading.verify import _worker_main; _worker_main()"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, package_parent],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        self.ready = False

    def wait_ready(self) -> None:
        """Block until the worker has imported math-verify (not charged to any call's budget)."""
        if self.ready:
            return
        try:
            msg = _read_msg(self.proc.stdout.fileno(), time.monotonic() + WORKER_STARTUP_TIMEOUT_S)
        except TimeoutError:
            msg = None
        if not (isinstance(msg, tuple) and msg and msg[0] == "ready"):
            self.kill()
            raise RuntimeError("rbctl grading worker failed to start (is math-verify installed?)")
        self.ready = True

    def request(self, op: str, a: str, b: str, timeout_s: float) -> tuple[str, bool, str]:
        """Send one job; on time-out or death the worker is killed and must not be reused."""
        try:
            _write_msg(self.proc.stdin.fileno(), (op, a, b, timeout_s))
        except OSError:  # BrokenPipeError: the worker died between calls
            code = self.kill()
            return "error", False, f"grading worker died (exit code {code})"
        try:
            reply = _read_msg(self.proc.stdout.fileno(), time.monotonic() + timeout_s)
        except TimeoutError:
            self.kill()
            return "timeout", False, f"no verdict within {timeout_s:g} s; worker killed"
        if reply is None:
            code = self.kill()
            return "error", False, f"grading worker died (exit code {code})"
        if reply[2].startswith(OUT_OF_MEMORY):
            self.kill()  # its heap may be fragmented or half-built: start afresh
        return reply

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        code = self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        return code


class _WorkerPool:
    """Idle workers shared by all threads; a thread takes one per call and gives it back."""

    def __init__(self, max_idle: int) -> None:
        self.lock = threading.Lock()
        self.idle: list[_Worker] = []
        self.max_idle = max_idle

    def acquire(self) -> _Worker:
        with self.lock:
            worker = self.idle.pop() if self.idle else None
        if worker is not None and not worker.alive:
            worker.kill()  # died while idle: reap it and close its pipes
            worker = None
        if worker is None:
            worker = _Worker()
        worker.wait_ready()
        return worker

    def release(self, worker: _Worker) -> None:
        if not worker.alive:
            # Killed after a time-out: start its replacement now so that its import time overlaps
            # with whatever the caller does next instead of delaying the next call.
            worker = _Worker()
        with self.lock:
            if len(self.idle) < self.max_idle:
                self.idle.append(worker)
                return
        worker.kill()

    def close(self) -> None:
        with self.lock:
            workers, self.idle = self.idle, []
        for w in workers:
            w.kill()


_POOL = _WorkerPool(max_idle=max(2, os.cpu_count() or 2))
atexit.register(lambda: _POOL.close())


def _reset_pool_in_child() -> None:
    # A forked child must not share pipes to its parent's workers; it starts its own.
    global _POOL
    _POOL = _WorkerPool(max_idle=_POOL.max_idle)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pool_in_child)


def _run(op: str, a: str, b: str, timeout_s: float) -> tuple[str, bool, str]:
    worker = _POOL.acquire()
    try:
        return worker.request(op, a, b, timeout_s)
    finally:
        _POOL.release(worker)


def warm_up() -> None:
    """Start one worker now (about 0.5 s), e.g. before timing-sensitive grading."""
    _POOL.release(_POOL.acquire())


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def _prepare(answer: str) -> str:
    """What math-verify is given for an answer: its thousands separators joined. Over-long answers
    are left as they are (the pre-check rejects them), so the regex never scans a huge string."""
    return join_digit_groups(answer) if len(answer) <= MAX_ANSWER_CHARS else answer


def grade_answer(extracted: str, answer: str, timeout_s: float = 5.0, extraction: str = "boxed") -> GradeResult:
    """Compare an already extracted answer with the gold ``answer`` (see module docstring).

    ``extraction``: how ``extracted`` was found, recorded in the result (one of EXTRACTIONS)."""
    if not extracted.strip():
        return GradeResult(False, extracted, "no_answer", "empty box", extraction)
    pred, gold = _prepare(extracted), _prepare(answer)
    for text, who in ((pred, "prediction"), (gold, "gold")):
        reason = precheck(text)
        if reason is not None:
            return GradeResult(False, extracted, "timeout", f"pre-check rejected {who}: {reason}", extraction)
    gold_letter = choice_letter(gold)
    if gold_letter is not None:
        m = _CHOICE_PRED.match(_strip_text_commands(pred))
        if m is not None:
            return GradeResult(m.group(1) == gold_letter, extracted, "ok", "choice letter", extraction)
    undone = unevaluated_computation(pred, gold)
    if undone is not None:
        return GradeResult(False, extracted, "unevaluated", undone, extraction)
    status, correct, detail = _run("grade", gold, pred, timeout_s)
    return GradeResult(correct, extracted, status, detail, extraction)


def grade_detailed(completion: str, answer: str, timeout_s: float = 5.0, extraction: str = "final") -> GradeResult:
    """Grade the answer of ``completion`` (extraction policy: last box, else a final-answer phrase,
    else with ``extraction`` last_number the last number) against ``answer``, with status and
    extraction kind."""
    extracted, kind = extract_final_answer(completion, extraction)
    if extracted is None:
        return GradeResult(False, None, "no_answer", extraction=kind)
    return grade_answer(extracted, answer, timeout_s, extraction=kind)


def grade(completion: str, answer: str, timeout_s: float = 5.0) -> bool:
    """True iff the answer of ``completion`` (`grade_detailed`) equals ``answer`` per math-verify."""
    return grade_detailed(completion, answer, timeout_s).correct


def grade_many(
    completions: list[str], answers: list[str], timeout_s: float = 5.0, workers: int | None = None,
    extraction: str = "final",
) -> list[GradeResult]:
    """``grade_detailed`` over pairs, ``workers`` at a time (default: one per CPU core), with the
    extraction mode ``extraction`` (EXTRACTION_MODES).

    Each thread holds its own worker subprocess, so the sympy work runs in parallel.
    """
    if len(completions) != len(answers):
        raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
    workers = max(1, min(workers or os.cpu_count() or 1, len(completions)))
    if workers == 1:
        return [grade_detailed(c, a, timeout_s, extraction) for c, a in zip(completions, answers)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda ca: grade_detailed(ca[0], ca[1], timeout_s, extraction), zip(completions, answers)))


def answers_equivalent(a: str | None, b: str | None, timeout_s: float = 5.0) -> bool:
    """Whether two extracted answers vote together in majority voting.

    Identical strings are equal (reflexivity, no sympy needed); otherwise math-verify in either
    direction, after `join_digit_groups` (so ``1\\,000`` and ``1000`` vote together). None,
    pre-check rejections, time-outs and errors are "not equivalent".
    """
    if a is None or b is None:
        return False
    if a.strip() == b.strip():
        return bool(a.strip())
    a, b = _prepare(a), _prepare(b)
    if precheck(a) is not None or precheck(b) is not None:
        return False
    status, equal, _ = _run("equiv", a, b, timeout_s)
    return status == "ok" and equal
