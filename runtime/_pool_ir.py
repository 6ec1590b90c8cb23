"""The thread pool's native code (see graphc_runtime.pool), as an llvmlite.ir module.

`graphc_pool_run(jobs, count)` runs a sequence of jobs, each a record of three i64 words
{body, arg, n}: `body(arg, c)` for c in 0..n, every chunk of job j before any of job
j + 1. State (module globals, reset from Python in a forked child): `pool_word`
(generation | job | next chunk), the sequence (`pool_table`, `pool_count`), `pool_done`
(chunks of the current job finished), `pool_published` (when the current job became
claimable, in cycle-counter ticks), `pool_busy` (a caller holds the pool), the futex
words (`pool_wake` for sleeping workers, `pool_finish` for a sleeping caller) and their
flags, the workers (`pool_started`, `pool_wanted`, `pool_tids`), pinning (`pool_pin`,
`pool_cpus`, `pool_ncpus`, `pool_caller_cpu`) and the tuning (`pool_worker_spins`,
`pool_caller_spins`, `pool_patience`).
"""
from __future__ import annotations

import llvmlite.ir as ir

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
I8P, I64P = ir.PointerType(I8), ir.PointerType(I64)
VOID = ir.VoidType()
SEQ = "seq_cst"
# a job word: generation (24 bits) | job (16) | chunks taken from the front (12), by the
# caller | chunks taken from the back (12), by the workers
JOB_SHIFT, FRONT_SHIFT = 24, 12
FIELD = (1 << FRONT_SHIFT) - 1   # a chunk count's bits
GENERATION = 1 << 40
HIGH = -GENERATION               # the generation's bits
NO_JOB = 0xFFFF                  # the job of a word being published (more than any count)


def c32(v):
    return ir.Constant(I32, v)


def c64(v):
    return ir.Constant(I64, v)


class _Pool:
    """Builds the module; one method per function."""

    def __init__(self, futex: int, machine: str, limits: dict, wait_op: int,
                 wake_op: int, spins: dict):
        self.m = m = ir.Module("graphc_pool")
        self.futex, self.wait_op, self.wake_op = futex, wait_op, wake_op
        assert limits["chunks"] <= FIELD and limits["jobs"] < NO_JOB, limits
        self.limits = limits
        self.max_cpus = limits["cpus"]
        g = self._var
        self.word, self.done, self.published = g("pool_word"), g("pool_done"), g("pool_published")
        self.table, self.count = g("pool_table", I64P, None), g("pool_count")
        self.busy, self.sleepers, self.wake = g("pool_busy", I32), g("pool_sleepers", I32), \
            g("pool_wake", I32)
        self.waiting, self.finish = g("pool_waiting", I32), g("pool_finish", I32)
        self.started, self.wanted = g("pool_started", I32), g("pool_wanted", I32)
        self.pin, self.ncpus = g("pool_pin", I32), g("pool_ncpus", I32)
        self.caller_cpu = g("pool_caller_cpu", I32, -1)
        self.worker_spins = g("pool_worker_spins", I64, spins["worker"])
        self.caller_spins = g("pool_caller_spins", I64, spins["caller"])
        self.patience = g("pool_patience", I64, spins["patience"])
        self.tids = self._array("pool_tids", I64, limits["workers"])
        self.cpus = self._array("pool_cpus", I32, self.max_cpus)
        fn = lambda ret, args, name, var_arg=False: ir.Function(
            m, ir.FunctionType(ret, args, var_arg=var_arg), name)
        self.syscall = fn(I64, [I64], "syscall", True)
        self.self_id = fn(I64, [], "pthread_self")
        self.getcpu = fn(I32, [], "sched_getcpu")
        self.set_affinity = fn(I32, [I64, I64, I8P], "pthread_setaffinity_np")
        self.create = fn(I32, [I64P, I8P, I8P, I8P], "pthread_create")
        self.clock = fn(I64, [], "llvm.readcyclecounter")
        if machine == "x86_64":
            pause = fn(VOID, [], "llvm.x86.sse2.pause")
            self.pause = lambda b: b.call(pause, [])
        else:
            hint = fn(VOID, [I32], "llvm.aarch64.hint")
            self.pause = lambda b: b.call(hint, [c32(1)])          # YIELD
        self.body_ty = ir.FunctionType(VOID, [I8P, I64])

    def _var(self, name, ty=I64, init=0):
        v = ir.GlobalVariable(self.m, ty, name)
        v.initializer = ir.Constant(ty, init)
        return v

    def _array(self, name, ty, n):
        v = ir.GlobalVariable(self.m, ir.ArrayType(ty, n), name)
        v.initializer = ir.Constant(ir.ArrayType(ty, n), None)
        return v

    @staticmethod
    def load(b, g):
        ty = g.type.pointee
        return b.load_atomic(g, SEQ, ty.width // 8 if isinstance(ty, ir.IntType) else 8)

    @staticmethod
    def store(b, value, g):
        ty = value.type
        b.store_atomic(value, g, SEQ, ty.width // 8 if isinstance(ty, ir.IntType) else 8)

    def wake_all(self, b, word):
        """Bump a futex word and wake everyone waiting on it."""
        b.atomic_rmw("add", word, c32(1), SEQ)
        b.call(self.syscall, [c64(self.futex), b.ptrtoint(word, I64), c64(self.wake_op),
                              c64(1 << 30), c64(0)])

    def sleep_on(self, b, word, seen):
        b.call(self.syscall, [c64(self.futex), b.ptrtoint(word, I64), c64(self.wait_op),
                              b.zext(seen, I64), c64(0)])

    @staticmethod
    def fields(b, w):
        """(job, chunks taken from the front, from the back) of a job word."""
        return (b.and_(b.lshr(w, c64(JOB_SHIFT)), c64(0xFFFF)),
                b.and_(b.lshr(w, c64(FRONT_SHIFT)), c64(FIELD)),
                b.and_(w, c64(FIELD)))

    def job(self, b, k):
        """(body, arg, n) of job k of the sequence now published."""
        rec = b.gep(self.load(b, self.table), [b.mul(k, c64(3))])
        return [b.load(b.gep(rec, [c64(i)])) for i in range(3)]

    # ---- i64 pool_step(i64 worker): claim and run one chunk; 0 when none is claimable ----
    def step(self):
        fn = ir.Function(self.m, ir.FunctionType(I64, [I64]), "pool_step")
        fn.linkage = "internal"
        bb = {n: fn.append_basic_block(n) for n in
              ("entry", "has_job", "chunks", "skip", "skipped", "claimable", "claim", "run",
               "advance", "idle", "again")}
        b = ir.IRBuilder(bb["entry"])
        w = self.load(b, self.word)
        k, front, back = self.fields(b, w)
        count = self.load(b, self.count)
        b.cbranch(b.icmp_unsigned("<", k, count), bb["has_job"], bb["idle"])
        b.position_at_end(bb["has_job"])
        body, arg, n = self.job(b, k)           # may be stale: the claim below checks
        nxt = b.add(k, c64(1))
        next_word = b.or_(b.and_(w, c64(HIGH)), b.shl(nxt, c64(JOB_SHIFT)))
        # the caller takes chunks from the front, workers from the back: on a quiet
        # machine each thread keeps the same part of consecutive kernels (in its cache)
        worker = b.icmp_unsigned("!=", fn.args[0], c64(0))
        c = b.select(worker, b.sub(b.sub(n, c64(1)), back), front)
        taken = b.select(worker, b.add(w, c64(1)), b.add(w, c64(1 << FRONT_SHIFT)))
        b.cbranch(b.icmp_unsigned("==", n, c64(0)), bb["skip"], bb["chunks"])
        b.position_at_end(bb["skip"])           # a job of no chunks: on to the next
        skipped = b.extract_value(b.cmpxchg(self.word, w, next_word, SEQ, SEQ), 1)
        b.cbranch(skipped, bb["skipped"], bb["again"])
        b.position_at_end(bb["skipped"])
        self._published(b, nxt, count)
        b.branch(bb["again"])
        b.position_at_end(bb["chunks"])
        b.cbranch(b.icmp_unsigned("<", b.add(front, back), n), bb["claimable"], bb["idle"])
        b.position_at_end(bb["claimable"])      # a worker leaves a one-chunk job to the
        waited = b.sub(b.call(self.clock, []), self.load(b, self.published))  # caller a while
        patient = b.and_(b.and_(worker, b.icmp_unsigned("==", n, c64(1))),
                         b.icmp_signed("<", waited, b.load(self.patience)))
        b.cbranch(patient, bb["idle"], bb["claim"])
        b.position_at_end(bb["claim"])
        claimed = b.extract_value(b.cmpxchg(self.word, w, taken, SEQ, SEQ), 1)
        b.cbranch(claimed, bb["run"], bb["again"])
        b.position_at_end(bb["run"])
        b.call(b.inttoptr(body, ir.PointerType(self.body_ty)), [b.inttoptr(arg, I8P), c])
        before = b.atomic_rmw("add", self.done, c64(1), SEQ)
        b.cbranch(b.icmp_unsigned("==", b.add(before, c64(1)), n), bb["advance"], bb["again"])
        b.position_at_end(bb["advance"])        # this job's last chunk: publish the next
        self.store(b, c64(0), self.done)
        self.store(b, b.call(self.clock, []), self.published)
        self.store(b, next_word, self.word)
        self._published(b, nxt, count)
        b.branch(bb["again"])
        b.position_at_end(bb["again"])
        b.ret(c64(1))
        b.position_at_end(bb["idle"])
        b.ret(c64(0))
        return fn

    def _published(self, b, nxt, count) -> None:
        """After job `nxt` became the current one: wake the caller if it sleeps (it runs
        the next job, or returns after the last), and sleeping workers for a job of
        several chunks."""
        with b.if_then(b.icmp_signed("!=", self.load(b, self.waiting), c32(0))):
            self.wake_all(b, self.finish)
        more = b.icmp_unsigned("<", nxt, count)
        with b.if_then(b.and_(more, b.icmp_signed(">", self.load(b, self.sleepers), c32(0)))):
            with b.if_then(b.icmp_unsigned(">", self.job(b, nxt)[2], c64(1))):
                self.wake_all(b, self.wake)

    # ---- the worker: step, else spin, else sleep ----
    def worker(self, step):
        fn = ir.Function(self.m, ir.FunctionType(I8P, [I8P]), "graphc_pool_worker")
        fn.linkage = "internal"
        bb = {n: fn.append_basic_block(n) for n in
              ("entry", "top", "idle", "spin", "sleep", "wait", "woken")}
        b = ir.IRBuilder(bb["entry"])
        spins = b.alloca(I64)
        b.store(c64(0), spins)
        b.branch(bb["top"])
        b.position_at_end(bb["top"])
        ran = b.call(step, [c64(1)])
        with b.if_then(b.icmp_unsigned("!=", ran, c64(0))):
            b.store(c64(0), spins)
        b.cbranch(b.icmp_unsigned("!=", ran, c64(0)), bb["top"], bb["idle"])
        b.position_at_end(bb["idle"])
        s = b.load(spins)
        b.cbranch(b.icmp_unsigned("<", s, b.load(self.worker_spins)), bb["spin"], bb["sleep"])
        b.position_at_end(bb["spin"])
        self.pause(b)
        b.store(b.add(s, c64(1)), spins)
        b.branch(bb["top"])
        b.position_at_end(bb["sleep"])
        seen = self.load(b, self.wake)
        b.atomic_rmw("add", self.sleepers, c32(1), SEQ)
        w = self.load(b, self.word)             # a chunk claimable meanwhile: no sleep
        k, front, back = self.fields(b, w)
        active = b.icmp_unsigned("<", k, self.load(b, self.count))
        with b.if_then(active):
            b.cbranch(b.icmp_unsigned("<", b.add(front, back), self.job(b, k)[2]),
                      bb["woken"], bb["wait"])
        b.branch(bb["wait"])
        b.position_at_end(bb["wait"])
        self.sleep_on(b, self.wake, seen)
        b.branch(bb["woken"])
        b.position_at_end(bb["woken"])
        b.atomic_rmw("sub", self.sleepers, c32(1), SEQ)
        b.store(c64(0), spins)
        b.branch(bb["top"])
        return fn

    # ---- i64 graphc_pool_thread(): 0 for callers, k + 1 for worker k ----
    def thread(self):
        fn = ir.Function(self.m, ir.FunctionType(I64, []), "graphc_pool_thread")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        me = b.call(self.self_id, [])
        found = b.alloca(I64)
        b.store(c64(0), found)

        def check(k):
            hit = b.icmp_unsigned("==", b.load(b.gep(self.tids, [c32(0), k])), me)
            with b.if_then(hit):
                b.store(b.add(b.sext(k, I64), c64(1)), found)
        counted_loop(b, self.load(b, self.started), check)
        b.ret(b.load(found))
        return fn

    # ---- pool_place(): workers on the allowed CPUs other than the caller's ----
    def place(self):
        fn = ir.Function(self.m, ir.FunctionType(VOID, []), "pool_place")
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        mask = b.alloca(I64, size=c32(self.max_cpus // 64))
        pos = b.alloca(I32)
        here = b.call(self.getcpu, [])
        moved = b.and_(b.icmp_signed("!=", b.load(self.pin), c32(0)),
                       b.icmp_signed("!=", here, b.load(self.caller_cpu)))
        count = b.load(self.ncpus)
        with b.if_then(b.and_(moved, b.icmp_signed(">", count, c32(0)))):
            b.store(here, self.caller_cpu)
            b.store(c32(-1), pos)               # the caller's CPU in the list, or -1

            def find(j):
                with b.if_then(b.icmp_signed("==", b.load(b.gep(self.cpus, [c32(0), j])),
                                             here)):
                    b.store(j, pos)
            counted_loop(b, count, find)
            p = b.load(pos)

            def pin_worker(k):
                after = b.and_(b.icmp_signed(">=", p, c32(0)), b.icmp_signed(">=", k, p))
                cpu = b.load(b.gep(self.cpus, [c32(0), b.srem(b.add(k, b.zext(after, I32)),
                                                               count)]))
                counted_loop(b, c32(self.max_cpus // 64), lambda w: b.store(c64(0),
                                                                      b.gep(mask, [w])))
                at = b.gep(mask, [b.lshr(cpu, c32(6))])
                b.store(b.or_(b.load(at), b.shl(c64(1), b.zext(b.and_(cpu, c32(63)), I64))),
                        at)
                b.call(self.set_affinity, [b.load(b.gep(self.tids, [c32(0), k])),
                                           c64(self.max_cpus // 8), b.bitcast(mask, I8P)])
            counted_loop(b, self.load(b, self.started), pin_worker)
        b.ret_void()
        return fn

    # ---- void graphc_pool_run(i64* jobs, i64 count) ----
    def run(self, step, worker, place):
        fn = ir.Function(self.m, ir.FunctionType(VOID, [I64P, I64]), "graphc_pool_run")
        jobs, count = fn.args
        bb = {n: fn.append_basic_block(n) for n in
              ("entry", "lock", "alone", "out", "start", "start_one", "publish", "loop",
               "work", "idle", "spin", "sleep", "finish")}
        b = ir.IRBuilder(bb["entry"])
        i, big = b.alloca(I64), b.alloca(I1)
        b.store(b.icmp_unsigned(">", count, c64(self.limits["jobs"])), big)

        def check(j):                           # a job of more chunks than a word counts
            n = b.load(b.gep(jobs, [b.add(b.mul(j, c64(3)), c64(2))]))
            with b.if_then(b.icmp_unsigned(">", n, c64(self.limits["chunks"]))):
                b.store(ir.Constant(I1, 1), big)
        counted_loop64(b, b.select(b.load(big), c64(0), count), check)
        b.cbranch(b.load(big), bb["alone"], bb["lock"])
        b.position_at_end(bb["lock"])           # the pool, unless another caller has it
        got = b.extract_value(b.cmpxchg(self.busy, c32(0), c32(1), SEQ, SEQ), 1)
        b.cbranch(got, bb["start"], bb["alone"])

        b.position_at_end(bb["alone"])          # every chunk here, in order
        def run_job(j):
            rec = b.gep(jobs, [b.mul(j, c64(3))])
            body, arg, n = (b.load(b.gep(rec, [c64(f)])) for f in range(3))
            counted_loop64(b, n, lambda c: b.call(b.inttoptr(body, ir.PointerType(self.body_ty)),
                                                  [b.inttoptr(arg, I8P), c]))
        counted_loop64(b, count, run_job)
        b.branch(bb["out"])
        b.position_at_end(bb["out"])
        b.ret_void()

        b.position_at_end(bb["start"])          # workers not started yet (or forked)
        have = b.load(self.started)
        b.cbranch(b.icmp_signed("<", have, b.load(self.wanted)), bb["start_one"],
                  bb["publish"])
        b.position_at_end(bb["start_one"])
        rc = b.call(self.create, [b.gep(self.tids, [c64(0), b.sext(have, I64)]),
                                  ir.Constant(I8P, None), b.bitcast(worker, I8P),
                                  ir.Constant(I8P, None)])
        with b.if_else(b.icmp_signed("==", rc, c32(0))) as (ok, failed):
            with ok:
                self.store(b, b.add(have, c32(1)), self.started)
                b.store(c32(-2), self.caller_cpu)          # place the workers again
            with failed:                        # no more threads: run with those we have
                b.store(have, self.wanted)
        b.branch(bb["start"])

        b.position_at_end(bb["publish"])
        b.call(place, [])
        # first a word of the new generation with no job: a thread that read the last
        # sequence's final word and then reads the new count and records below cannot
        # claim with it (its compare-and-swap fails), and no thread claims until the
        # records are in place
        generation = b.and_(b.add(self.load(b, self.word), c64(GENERATION)), c64(HIGH))
        self.store(b, b.or_(generation, c64(NO_JOB << JOB_SHIFT)), self.word)
        self.store(b, jobs, self.table)
        self.store(b, count, self.count)
        self.store(b, c64(0), self.done)
        self.store(b, b.call(self.clock, []), self.published)
        self.store(b, generation, self.word)
        with b.if_then(b.icmp_signed(">", self.load(b, self.sleepers), c32(0))):
            self.wake_all(b, self.wake)
        b.store(c64(0), i)
        b.branch(bb["loop"])

        b.position_at_end(bb["loop"])           # the caller works too, until the last job
        w = self.load(b, self.word)             # is done (no other generation can start)
        k = self.fields(b, w)[0]
        b.cbranch(b.icmp_unsigned(">=", k, count), bb["finish"], bb["work"])
        b.position_at_end(bb["work"])
        ran = b.call(step, [c64(0)])
        with b.if_then(b.icmp_unsigned("!=", ran, c64(0))):
            b.store(c64(0), i)
        b.cbranch(b.icmp_unsigned("!=", ran, c64(0)), bb["loop"], bb["idle"])
        b.position_at_end(bb["idle"])           # spin a while, then sleep: a CPU left
        iv = b.load(i)                          # idle lets the OS move a thread that
        b.store(b.add(iv, c64(1)), i)           # waits for one there
        b.cbranch(b.icmp_unsigned("<", iv, b.load(self.caller_spins)), bb["spin"], bb["sleep"])
        b.position_at_end(bb["spin"])
        self.pause(b)
        b.branch(bb["loop"])
        b.position_at_end(bb["sleep"])
        seen = self.load(b, self.finish)
        self.store(b, c32(1), self.waiting)
        with b.if_then(b.icmp_unsigned("==", self.load(b, self.word), w)):
            self.sleep_on(b, self.finish, seen)
        self.store(b, c32(0), self.waiting)
        b.store(c64(0), i)
        b.branch(bb["loop"])

        b.position_at_end(bb["finish"])
        self.store(b, c32(0), self.busy)
        b.ret_void()
        return fn

    # ---- i64 graphc_pool_ticks(): the cycle counter (to measure its rate) ----
    def ticks(self):
        fn = ir.Function(self.m, ir.FunctionType(I64, []), "graphc_pool_ticks")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.ret(b.call(self.clock, []))


def build(futex: int, machine: str, limits: dict, wait_op: int, wake_op: int,
          spins: dict) -> ir.Module:
    """limits: the most jobs of a call, chunks of a job, workers, and CPU numbers."""
    p = _Pool(futex, machine, limits, wait_op, wake_op, spins)
    step = p.step()
    p.run(step, p.worker(step), p.place())
    p.thread()
    p.ticks()
    return p.m


def counted_loop(b: ir.IRBuilder, count, body) -> None:
    """for (i32 i = 0; i < count; i++) body(i), at the builder's position (the counter
    lives in the function's entry block)."""
    _loop(b, count, body, I32)


def counted_loop64(b: ir.IRBuilder, count, body) -> None:
    _loop(b, count, body, I64)


def _loop(b, count, body, ty) -> None:
    fn = b.function
    with b.goto_entry_block():
        slot = b.alloca(ty)
    b.store(ir.Constant(ty, 0), slot)
    head, step, done = (fn.append_basic_block(n) for n in ("loop", "loop_body", "loop_end"))
    b.branch(head)
    b.position_at_end(head)
    i = b.load(slot)
    b.cbranch(b.icmp_signed("<", i, count), step, done)
    b.position_at_end(step)
    body(i)
    b.store(b.add(i, ir.Constant(ty, 1)), slot)
    b.branch(head)
    b.position_at_end(done)
