"""Real nodes (issue 10): node processes, attached scripts, clusters, modules in running nodes.

Every cluster here is brought up under a name of its own in a run directory of its own
and brought down at the end, and the tests check that no process, run directory or
/dev/shm entry survives it -- also after a crash. Nothing asserts a speed (speed is in
benchmarks/).
"""
from __future__ import annotations

import contextlib
import errno
import io
import json
import mmap  # noqa: F401 - used by the attacker script's imports
import multiprocessing
import os
import re
import select
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import trio
import trio.testing

from libdp._attach import CROSSED_SPIN_S, attach
from libdp._endpoint_rings import Spinner
from libdp._cli import main
from libdp._realnode import _wait_gone, cluster_down, cluster_up, node_status, plan_placement, script_cpu, start_node
from libdp._realprograms import all_to_all
from libdp._realrun import run_real_spmd

TIMEOUT = 60.0


def _shm_entries(name: str) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if name in n]


def _alive(pid: int) -> bool:
    """Running (a zombie -- dead, not yet reaped by its parent -- is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def run_base(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("dprun"))
    old = os.environ.get("DP_RUN_BASE")
    os.environ["DP_RUN_BASE"] = base
    yield base
    if old is None:
        os.environ.pop("DP_RUN_BASE", None)
    else:
        os.environ["DP_RUN_BASE"] = old


@pytest.fixture(scope="module")
def two(run_base):
    """A 2-node shm cluster for the whole module; down at the end, leaving nothing behind."""
    c = cluster_up(2, name=f"t{os.getpid()}", tied=True)
    pids = [node_status(c, n)["pid"] for n in c.nids()]
    old = os.environ.get("DP_RUN_DIR")
    os.environ["DP_RUN_DIR"] = c.run_dir
    yield c
    if old is None:
        os.environ.pop("DP_RUN_DIR", None)
    else:
        os.environ["DP_RUN_DIR"] = old
    cluster_down(c)
    assert not os.path.exists(c.run_dir)
    assert not any(_alive(p) for p in pids)
    assert _shm_entries(c.name) == []


# --------------------------------------------------------------------------- the calls


def test_write_read_and_readiness_through_two_node_processes(two):
    a, b = attach(node=0), attach(node=1)
    try:
        fa, fb = a.sync.dp_open(5), b.sync.dp_open(5)
        assert a.sync.dp_target(fa, 1, 5) == 0
        assert select.select([fb], [], [], 0)[0] == []          # a real descriptor, not readable yet
        assert a.sync.dp_write(fa, b"hello") == 5               # through the call gate
        assert select.select([fb], [], [], TIMEOUT)[0] == [fb]  # readable once the message is in the pool
        assert b.sync.dp_read(fb) == b"hello"
        assert select.select([fb], [], [], 0)[0] == []          # and not once it was taken
        assert a.sync.write(fa, b"generic") == 7                # the generic entry, through the node's table
        assert b.sync.read(fb, 100) == b"generic"
        a.sync.dp_write(fa, b"truncate me")
        assert b.sync.dp_read(fb, 8) == b"truncate"
        a.sync.close(fa)
        b.sync.close(fb)
    finally:
        a.detach()
        b.detach()


def test_polling_scripts_deliver_the_same_and_spin_is_checked(two, monkeypatch):
    """DP_SPIN_US: a script that polls before it sleeps sees the same messages; a bad
    value is EINVAL at attach, before anything is made."""
    monkeypatch.setenv("DP_SPIN_US", "1000")
    a, b = attach(node=0), attach(node=1)
    try:
        assert a.spin_s == b.spin_s == 0.001
        fa, fb = a.sync.dp_open(6), b.sync.dp_open(6)
        a.sync.dp_target(fa, 1, 6)
        b.sync.dp_target(fb, 0, 6)
        for k in range(20):                         # a ping-pong: every wait may end while polling
            a.sync.dp_write(fa, b"%d" % k)
            assert b.sync.dp_read(fb) == b"%d" % k
            b.sync.dp_write(fb, b"r%d" % k)
            assert a.sync.dp_read(fa) == b"r%d" % k
        # The blocking read's wait is C (`EndpointRings.read_sleeping`), and it keeps the
        # process's spinner's count: waits that outlast the poll make the next ones sleep at
        # once, one that ends within it turns polling back on.
        late, before = [], b.spinner.misses        # (a ping-pong wait above may have outlasted it too)
        for k in range(Spinner.MISSES_TO_SLEEP):
            writer = threading.Timer(0.2, a.sync.dp_write, (fa, b"late"))
            t = time.perf_counter()
            writer.start()
            assert b.sync.dp_read(fb) == b"late"
            late.append(time.perf_counter() - t > 0.01)   # it did wait (not behind a stalled thread)
            writer.join()
        assert b.spinner.misses == before + sum(late)
        if all(late):
            assert b.spinner.limit() == 0.0
        a.sync.dp_write(fa, b"soon")                # delivered within the poll's millisecond
        assert b.sync.dp_read(fb) == b"soon"
        t = time.perf_counter()
        a.sync.dp_write(fa, b"again")
        assert b.sync.dp_read(fb) == b"again"
        if time.perf_counter() - t < 0.001:       # so its wait ended within the poll
            assert b.spinner.misses == 0                # (polls again, unless the core was crowded)
    finally:
        a.detach()
        b.detach()
    for bad in ("fast", "-5", "1e9"):
        monkeypatch.setenv("DP_SPIN_US", bad)
        with pytest.raises(OSError) as exc:
            attach(node=0)
        assert exc.value.errno == errno.EINVAL
    with pytest.raises(OSError) as exc:
        attach(node=0, spin_s=True)
    assert exc.value.errno == errno.EINVAL


def test_a_wait_stops_polling_while_its_waits_outlast_the_poll():
    s = Spinner(0.001)
    assert s.limit() == 0.001
    for _ in range(Spinner.MISSES_TO_SLEEP - 1):
        s.waited(0.5)                               # an idle server's waits
    assert s.limit() == 0.001                       # one stretched wait does not switch polling off
    s.waited(0.5)
    assert s.limit() == 0.0                         # waits polling cannot catch: sleep at once
    s.waited(0.0002)                                # one that polling would have caught
    assert s.limit() == 0.001
    assert Spinner(0.0).limit() == 0.0
    t = time.perf_counter()                         # the spinner's clock
    assert not s.yielded(t, t + 20e-6) and s.limit() == 0.001   # a yield to a node's pass
    assert not s.yielded(t, t + 2e-3) and s.limit() == 0.001    # a neighbour's long step, once
    assert s.yielded(t + 0.01, t + 0.012) and s.crowded == 1    # again soon: a CPU-bound neighbour
    assert s.limit() == 0.0                         # no polling for a while: sleep, be woken
    s = Spinner(0.001)
    t = time.perf_counter() - 1.0
    s.yielded(t, t + 2e-3)                          # crowded yields long ago
    s.yielded(t + 0.01, t + 0.012)
    assert s.limit() == 0.001
    assert Spinner(0.001).spin(lambda: (1, 2)) == (1, 2)
    tries = []
    assert Spinner(0.0).spin(lambda: tries.append(1)) is None and tries == [1]   # no poll: one try


def test_tokens_are_read_only_views_of_the_pool_released_by_the_user(two):
    a, b = attach(node=0), attach(node=1)
    try:
        fa, fb = a.sync.dp_open(6), b.sync.dp_open(6)
        a.sync.dp_target(fa, 1, 6)
        for m in (b"first", b"second"):
            a.sync.dp_write(fa, m)
        t1 = b.sync.dp_read_token(fb)
        t2 = b.sync.dp_read_token(fb)
        assert (bytes(t1.data), bytes(t2.data)) == (b"first", b"second")
        assert t1.source == (0, 6) and t1.data.readonly
        with pytest.raises(TypeError):
            t1.data[0] = 0                                      # Python refuses a read-only view
        t2.release()                                            # in any order
        t1.release()
        with pytest.raises(OSError) as e:
            t1.release()
        assert e.value.errno == errno.EINVAL
        a.sync.dp_write(fa, b"third")
        t3 = b.sync.dp_read_token(fb)
        b.sync.close(fb)
        with pytest.raises(OSError) as e:                       # closing the endpoint revoked it
            t3.release()
        assert e.value.errno == errno.EBADF
        a.sync.close(fa)
    finally:
        a.detach()
        b.detach()


_ATTACKER = textwrap.dedent("""
    import ctypes, mmap, sys
    from libdp import attach
    dp = attach(node=1, run_dir=sys.argv[1])
    fd = dp.sync.dp_open(int(sys.argv[2]))
    e = dp._endpoint(fd)
    try:
        mmap.mmap(e.tbp_fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        print("writable", flush=True)
    except PermissionError:
        print("EACCES", flush=True)
    for line in open("/proc/self/maps"):        # the library's read-only mapping of the pool
        if "dp-n1-ep" + sys.argv[2] + "-tbp" in line:
            start = int(line.split("-")[0], 16)
            break
    else:
        print("unmapped", flush=True)
        sys.exit(3)
    print("storing", flush=True)
    ctypes.memset(start, 0x41, 1)
    print("stored", flush=True)
""")


def test_a_user_write_to_the_pool_faults(two):
    """The pool's descriptor is read-only (no writable mapping) and a store into the mapped
    pool is SIGSEGV: the process sees the kernel's pages, not a copy."""
    r = subprocess.run([sys.executable, "-c", _ATTACKER, two.run_dir, "31"], capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.stdout.split() == ["EACCES", "storing"], r.stdout + r.stderr
    assert r.returncode == -signal.SIGSEGV


def _hold_endpoint(run_dir, ep, sock):
    dp = attach(node=0, run_dir=run_dir)
    fd = dp.sync.dp_open(ep)
    socket.send_fds(sock, [b"fd"], [fd])   # hand the very descriptor to the test process
    sock.recv(1)                            # until told to go (or killed)


def test_one_process_cannot_use_another_ones_endpoint(two):
    """An fd a process did not get from its node is EBADF; another process's endpoint is
    EACCES; a killed process's endpoints are reclaimed by the node."""
    ctx = multiprocessing.get_context("fork")
    parent, child = socket.socketpair()
    p = ctx.Process(target=_hold_endpoint, args=(two.run_dir, 40, child))
    p.start()
    try:
        _msg, (stolen,), _f, _a = socket.recv_fds(parent, 16, 1)
        a = attach(node=0)
        try:
            with pytest.raises(OSError) as e:                   # its endpoint number is taken
                a.sync.dp_open(40)
            assert e.value.errno == errno.EADDRINUSE
            try:
                for call in (lambda: a.sync.dp_write(stolen, b"x"), lambda: a.sync.dp_read(stolen),
                             lambda: a.sync.close(stolen)):
                    with pytest.raises(OSError) as e:
                        call()
                    assert e.value.errno == errno.EACCES
            finally:
                os.close(stolen)
            r, w = os.pipe()
            try:
                with pytest.raises(OSError) as e:
                    a.sync.dp_write(r, b"x")                    # an fd of this process, not a node's file
                assert e.value.errno == errno.EBADF
            finally:
                os.close(r)
                os.close(w)
            with pytest.raises(OSError) as e:
                a.sync.dp_read(9999)
            assert e.value.errno == errno.EBADF
        finally:
            a.detach()
    finally:
        p.kill()
        p.join()
    deadline = time.monotonic() + TIMEOUT
    a = attach(node=0)
    try:
        while True:                                             # the node noticed and closed it
            try:
                a.sync.close(a.sync.dp_open(40))
                break
            except OSError as exc:
                assert exc.errno == errno.EADDRINUSE and time.monotonic() < deadline
                time.sleep(0.01)
    finally:
        a.detach()


def test_errnos_are_those_of_modeled_mode(two):
    a = attach(node=0)
    try:
        fd = a.sync.dp_open(50)
        cases = [
            (lambda: a.sync.dp_write(fd, b"x"), errno.EDESTADDRREQ),
            (lambda: a.sync.dp_target(fd, 99, 1), errno.EHOSTUNREACH),
            (lambda: a.sync.dp_target(fd, 1, -1), errno.EINVAL),
            (lambda: a.sync.dp_open(50), errno.EADDRINUSE),
            (lambda: a.sync.dp_open(1 << 20), errno.EINVAL),
            (lambda: a.sync.dp_write(fd, "text"), errno.EFAULT),
            (lambda: a.sync.dp_read(fd, -1), errno.EINVAL),
        ]
        for call, err in cases:
            with pytest.raises(OSError) as e:
                call()
            assert e.value.errno == err, (e.value, err)
        a.sync.dp_target(fd, 1, 50)
        with pytest.raises(OSError) as e:
            a.sync.dp_write(fd, bytes(1501))
        assert e.value.errno == errno.EMSGSIZE
        a.sync.set_blocking(fd, False)
        with pytest.raises(BlockingIOError):
            a.sync.dp_read(fd)
        with pytest.raises(BlockingIOError):
            a.sync.read(fd, 10)
        a.sync.close(fd)
        with pytest.raises(OSError) as e:
            a.sync.close(fd)
        assert e.value.errno == errno.EBADF
    finally:
        a.detach()


def test_trio_calls_and_wait_readable(two):
    async def main_():
        a, b = attach(node=0), attach(node=1)
        fa, fb = await a.dp_open(8), await b.dp_open(8)
        await a.dp_target(fa, 1, 8)
        await b.dp_target(fb, 0, 8)
        with trio.move_on_after(0.05) as scope:                # nothing there: a read waits...
            await b.dp_read(fb)
        assert scope.cancelled_caught                           # ...and can be cancelled
        await a.dp_write(fa, b"ping")
        await trio.lowlevel.wait_readable(fb)
        assert await b.dp_read(fb) == b"ping"
        got = []

        async def reader():
            got.append(await a.read(fa, 64))                    # a generic read parked in the node
        async with trio.open_nursery() as n:
            n.start_soon(reader)
            await trio.sleep(0.05)
            await b.dp_write(fb, b"pong")
        assert got == [b"pong"]
        for dp, fd in ((a, fa), (b, fb)):
            await dp.close(fd)
            dp.detach()
    trio.run(main_)


def test_every_attached_async_call_is_a_checkpoint(two):
    """trio's rule: a public async call checks for cancellation and is a schedule point,
    even when it need not wait (the gate took the entry, a message was there), so a task
    looping on such calls cannot starve the others. (Where trio's pass would find no other
    task to run, `kernelsim.checkpoint` decides so itself, and counts the point as trio
    does: tests/test_trio_binding.py shows no task starves.)"""
    async def main_():
        a, b = attach(node=0), attach(node=1)
        fa, fb = await a.dp_open(9), await b.dp_open(9)
        await a.dp_target(fa, 1, 9)
        for i in range(20):
            with trio.testing.assert_checkpoints():
                await a.dp_write(fa, b"m%02d" % i)
        for i in range(20):
            await trio.lowlevel.wait_readable(fb)
            with trio.testing.assert_checkpoints():
                assert await b.dp_read(fb) == b"m%02d" % i
        # A read that waits -- here asleep in poll(2), trio having nothing else to do, until
        # another thread's write arrives -- is a checkpoint too, and counted once.
        late = threading.Timer(0.05, a.sync.dp_write, (fa, b"late"))
        late.start()
        with trio.testing.assert_checkpoints():
            assert await b.dp_read(fb) == b"late"
        late.join()
        # A cancelled scope ends a read that would wait at once, as trio's park would: it
        # takes nothing (were it to sleep, it would wake for "first" and lose it).
        net = threading.Timer(0.3, lambda: (a.sync.dp_write(fa, b"first"), a.sync.dp_write(fa, b"second")))
        net.start()
        with trio.CancelScope() as scope:
            scope.cancel()
            await b.dp_read(fb)
        assert scope.cancelled_caught
        assert await b.dp_read(fb) == b"first"
        net.join()
        assert await b.dp_read(fb) == b"second"
        for dp, fd in ((a, fa), (b, fb)):
            await dp.close(fd)
            dp.detach()
    trio.run(main_)


def test_a_dead_node_wakes_its_blocked_scripts_with_enetdown(run_base):
    c = cluster_up(2, name=f"dead{os.getpid()}", tied=True)
    try:
        b = attach(node=1, run_dir=c.run_dir)
        fb = b.sync.dp_open(3)
        pid = node_status(c, 1)["pid"]
        ctx = multiprocessing.get_context("fork")
        k = ctx.Process(target=_kill_later, args=(pid, 0.2))
        k.start()
        with pytest.raises(OSError) as e:
            b.sync.dp_read(fb)                                  # blocks; then the node dies
        assert e.value.errno == errno.ENETDOWN and "node 1" in e.value.strerror
        with pytest.raises(OSError) as e:                       # and every later call says so at once
            b.sync.dp_open(4)
        assert e.value.errno == errno.ENETDOWN
        k.join()
        b.detach()
    finally:
        cluster_down(c)
    assert _shm_entries(c.name) == [] and not os.path.exists(c.run_dir)


def _kill_later(pid, delay):
    time.sleep(delay)
    os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- modules in running nodes


def test_modules_in_a_running_node_behave_as_in_modeled_mode(two, capsys):
    a = attach(node=0)
    try:
        assert [m["name"] for m in a.lsmod()][:2] == ["dec21140", "dp"]
        fd = a.sync.dp_open(60)
        with pytest.raises(OSError) as e:
            a.rmmod("dp")                                       # an endpoint is open
        assert e.value.errno == errno.EBUSY
        with pytest.raises(OSError) as e:
            a.insmod("no_such_module")
        assert e.value.errno == errno.ENOENT
        a.sync.close(fd)
    finally:
        a.detach()
    assert main(["lsmod", "--node", "all", "--cluster", two.path, "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"0", "1"}
    assert main(["insmod", "dp", "--node", "0", "--cluster", two.path]) == 1      # EEXIST, one line
    err = capsys.readouterr().err
    assert err.startswith("dp: node 0:") and err.count("\n") == 1
    assert main(["modinfo", "dp", "--node", "1", "--cluster", two.path]) == 0
    assert "Directed Point" in capsys.readouterr().out
    assert main(["rmmod", "dp", "--node", "1", "--cluster", two.path]) == 0       # nothing uses it on node 1
    assert main(["insmod", "dp", "tbp_slots=-3", "--node", "1", "--cluster", two.path]) == 1
    assert "tbp_slots" in capsys.readouterr().err               # EINVAL naming the parameter
    assert main(["insmod", "dp", "tbp_slots=8", "--node", "1", "--cluster", two.path]) == 0
    b = attach(node=1)
    try:
        fd = b.sync.dp_open(61)
        assert b._endpoint(fd).deliveries.slots == 8             # the new parameter took effect
        b.sync.close(fd)
    finally:
        b.detach()


# --------------------------------------------------------------------------- nodes, clusters, files


def test_run_directory_and_socket_keep_other_users_out(two):
    assert stat.S_IMODE(os.stat(two.run_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(two.socket_path(0)).st_mode) == 0o600
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_attach_as_nobody, args=(two.run_dir, child))
    p.start()
    assert parent.recv() in (errno.EACCES, errno.ENOENT)
    p.join()


def _attach_as_nobody(run_dir, conn):
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    try:
        attach(node=0, run_dir=run_dir)
        conn.send(None)
    except OSError as exc:
        conn.send(exc.errno)


def test_node_start_stop_and_status_from_the_command_line(run_base, capsys):
    c = cluster_up(1, name=f"one{os.getpid()}", tied=True)
    try:
        assert main(["node", "status", "--cluster", c.path, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["nodes"][0]["state"] == "up"
        assert main(["node", "stop", "0", "--cluster", c.path]) == 0
        assert sorted(os.listdir(c.run_dir)) == ["cluster.toml"]     # socket, pid and log removed
        assert main(["node", "stop", "0", "--cluster", c.path]) == 1
        assert "not running" in capsys.readouterr().err
        assert main(["node", "start", "--id", "0", "--cluster", c.path, "--detach"]) == 0
        assert node_status(c, 0)["state"] == "up"
        with pytest.raises(OSError) as e:
            start_node(c, 0)
        assert e.value.errno == errno.EEXIST
    finally:
        cluster_down(c)
    assert not os.path.exists(c.run_dir) and _shm_entries(c.name) == []


def test_placement_pins_nodes_to_cpus_only_where_cores_are_short():
    assert plan_placement(2, "auto", cpus={0, 1}) == ("cross", {0: 0, 1: 1})
    assert plan_placement(3, "auto", cpus={2, 5}) == ("cross", {0: 2, 1: 5, 2: 2})
    assert plan_placement(2, "auto", cpus={3}) == ("pair", {0: 3, 1: 3})     # one CPU: crossing is pairing
    assert plan_placement(2, "auto", cpus=range(4)) == ("none", {})      # a core for every process
    assert plan_placement(2, "pair", cpus=range(8)) == ("pair", {0: 0, 1: 1})
    assert plan_placement(2, "cross", cpus=range(8)) == ("cross", {0: 0, 1: 1})
    assert plan_placement(2, "none", cpus={0}) == ("none", {})
    # Where scripts go: beside their node (pair), on the next node's CPU (cross), round.
    assert script_cpu("pair", 5, [2, 5]) == 5
    assert script_cpu("cross", 2, [2, 5, 2]) == 5 and script_cpu("cross", 5, [2, 5, 2]) == 2
    assert script_cpu("cross", 3, [3]) == 3
    assert script_cpu("none", 1, [0, 1]) is None and script_cpu("cross", None, []) is None
    with pytest.raises(OSError) as e:
        plan_placement(2, "spread")
    assert e.value.errno == errno.EINVAL
    from libdp._clusterfile import ClusterFile, NodeSpec
    with pytest.raises(OSError) as e:
        ClusterFile("c", "dec21140", "shm", [NodeSpec(0, cpu=-1)])        # a cluster file's cpu: a CPU number
    assert e.value.errno == errno.EINVAL


def test_a_paired_node_and_its_script_share_a_cpu_until_the_script_detaches(run_base, monkeypatch):
    """Placement pair: the node runs pinned to its CPU, a script attaching to it joins it
    there (and waits without polling), and gets its own CPUs back when it detaches;
    DP_PIN=0 keeps a script where it is; `dp node start --cpu` overrides the file."""
    monkeypatch.delenv("DP_SPIN_US", raising=False)
    c = cluster_up(1, name=f"pin{os.getpid()}", tied=True, placement="pair")
    mine = os.sched_getaffinity(0)
    try:
        cpu = c.node(0).cpu
        assert cpu in mine and c.extra["placement"] == "pair"
        assert os.sched_getaffinity(node_status(c, 0)["pid"]) == {cpu}
        assert node_status(c, 0)["gives_way"]           # its own scripts share its core
        dp = attach(node=0, run_dir=c.run_dir)
        try:
            assert dp.pinned and os.sched_getaffinity(0) == {cpu} and dp.spin_s == 0.0
            fd = dp.sync.dp_open(3)
            dp.sync.dp_target(fd, 0, 3)
            dp.sync.dp_write(fd, b"on one core")
            assert dp.sync.dp_read(fd) == b"on one core"
        finally:
            dp.detach()
        assert os.sched_getaffinity(0) == mine
        monkeypatch.setenv("DP_PIN", "0")
        dp = attach(node=0, run_dir=c.run_dir)
        assert not dp.pinned and os.sched_getaffinity(0) == mine
        dp.detach()
        monkeypatch.setenv("DP_PIN", "yes")
        with pytest.raises(OSError) as e:
            attach(node=0, run_dir=c.run_dir)
        assert e.value.errno == errno.EINVAL
        monkeypatch.delenv("DP_PIN")
        if len(mine) > 1:
            other = max(mine - {cpu})
            assert main(["node", "stop", "0", "--cluster", c.path]) == 0
            assert main(["node", "start", "--id", "0", "--cluster", c.path, "--detach", "--cpu", str(other)]) == 0
            assert os.sched_getaffinity(node_status(c, 0)["pid"]) == {other}
    finally:
        cluster_down(c)
    assert os.sched_getaffinity(0) == mine


def test_a_crossed_script_runs_on_the_next_nodes_cpu(run_base, monkeypatch):
    """Placement cross: each node pinned to its CPU, a script attaching to node i runs on
    node i+1's (round; its own node's CPU where the cluster has one CPU), polls before it
    sleeps there (not on its own node's CPU), and gets its own CPUs back when it detaches."""
    monkeypatch.delenv("DP_SPIN_US", raising=False)
    monkeypatch.delenv("DP_PIN", raising=False)
    c = cluster_up(2, name=f"cross{os.getpid()}", tied=True, placement="cross")
    mine = os.sched_getaffinity(0)
    try:
        cpus = [c.node(0).cpu, c.node(1).cpu]
        assert c.extra["placement"] == "cross" and all(cpu in mine for cpu in cpus)
        assert [os.sched_getaffinity(node_status(c, n)["pid"]) for n in (0, 1)] == [{cpus[0]}, {cpus[1]}]
        assert c.extra["spin_s"] > 0 if cpus[0] != cpus[1] else "spin_s" not in c.extra
        assert [node_status(c, n)["script_cpu"] for n in (0, 1)] == [cpus[1], cpus[0]]
        # The scripts on a node's core are the other node's: a yield that gave the core to
        # them does not send the node to sleep.
        assert [node_status(c, n)["gives_way"] for n in (0, 1)] == [cpus[0] == cpus[1]] * 2
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["cluster", "status", "--cluster", c.path]) == 0
        assert "placement cross" in out.getvalue()
        assert f"node 0: up, pid {node_status(c, 0)['pid']}, CPU {cpus[0]} (its scripts " in out.getvalue()
        dp = attach(node=0, run_dir=c.run_dir)
        try:
            assert dp.pinned and os.sched_getaffinity(0) == {cpus[1]}
            assert dp.spin_s == (CROSSED_SPIN_S if cpus[0] != cpus[1] else 0.0)
            fd = dp.sync.dp_open(3)
            dp.sync.dp_target(fd, 1, 3)
            back = attach(node=1, run_dir=c.run_dir)     # the same process: stays where the first put it
            try:
                fb = back.sync.dp_open(3)
                dp.sync.dp_write(fd, b"across")
                assert back.sync.dp_read(fb) == b"across" and os.sched_getaffinity(0) == {cpus[1]}
                loop = node_status(c, 1)["loop"]        # the node's loop counts what it did
                assert 1 <= loop["busy_passes"] <= loop["passes"] and loop["busy_s"] > 0 and loop["sleeps"] >= 0
            finally:
                back.detach()
        finally:
            dp.detach()
        assert os.sched_getaffinity(0) == mine
    finally:
        cluster_down(c)


def test_sigterm_stops_a_node_that_is_polling(run_base):
    """A node polling right after work stops on SIGTERM at once: its pass is compiled code
    that never sleeps in a system call a signal would interrupt, so it must ask for the
    signal's handler itself (a node used to spin on until SIGKILL, 10 s later)."""
    for attempt in range(4):                # the signal must land inside the poll: try a few times
        c = cluster_up(2, name=f"term{os.getpid()}x{attempt}", tied=True)
        try:
            a, b = attach(node=0, run_dir=c.run_dir), attach(node=1, run_dir=c.run_dir)
            fa, fb = a.sync.dp_open(5), b.sync.dp_open(5)
            a.sync.dp_target(fa, 1, 5)
            a.sync.dp_write(fa, b"work")
            assert b.sync.dp_read(fb) == b"work"
            a.sync.close(fa)
            b.sync.close(fb)
            a.detach()
            b.detach()
            pids = [node_status(c, n)["pid"] for n in c.nids()]
            for pid in pids:
                os.kill(pid, signal.SIGTERM)
            for pid in pids:
                assert _wait_gone(pid, 5.0), f"node process {pid} ignored SIGTERM"
        finally:
            cluster_down(c)


def test_cluster_down_after_a_crash_leaves_nothing(run_base):
    c = cluster_up(3, name=f"crash{os.getpid()}", tied=True)
    pids = [node_status(c, n)["pid"] for n in c.nids()]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)                            # every node crashes
    for pid in pids:
        while _alive(pid):
            time.sleep(0.01)
    done = cluster_down(c.path)
    assert done["stopped"] == []                                # no process was left to stop
    assert not os.path.exists(c.run_dir) and _shm_entries(c.name) == []


def test_a_cluster_that_cannot_come_up_leaves_nothing(run_base):
    name = f"bad{os.getpid()}"
    with pytest.raises(OSError) as e:
        cluster_up(2, name=name, params=["no.such.key=1"])
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        cluster_up(2, name=name, load=["no_such_module"])
    assert "no_such_module" in e.value.strerror
    assert not os.path.exists(os.path.join(run_base, name)) and _shm_entries(name) == []


# --------------------------------------------------------------------------- N nodes


@pytest.mark.parametrize("transport", ["shm", "udp"])
def test_all_to_all_among_four_nodes(run_base, transport):
    results, _stats = run_real_spmd(all_to_all, nodes=4, transport=transport, timeout=TIMEOUT)
    for rank, got in enumerate(results):
        assert set(got) == set(range(4)) - {rank}
        for peer, msgs in got.items():
            assert msgs == [f"{peer}->{rank}#{k}" for k in range(20)]     # all, in order, once


def test_all_to_all_among_four_nodes_over_packet(run_base):
    from kernelsim.media.netns import NetnsCluster
    from pyroute2 import netns
    ok, why = NetnsCluster.available()
    if not ok:
        pytest.skip(why)
    c = cluster_up(4, name=f"pk{os.getpid()}", transport="packet", tied=True)
    made = list(c.extra["namespaces"])
    try:
        results, _stats = run_real_spmd(all_to_all, nodes=4, cluster=c.path, timeout=TIMEOUT)
    finally:
        cluster_down(c)
    for rank, got in enumerate(results):
        for peer, msgs in got.items():
            assert msgs == [f"{peer}->{rank}#{k}" for k in range(20)]
    assert made and not set(made) & set(netns.listnetns())          # every namespace it made is gone
    assert not os.path.exists(c.run_dir) and _shm_entries(c.name) == []


# --------------------------------------------------------------------------- a rank that is its node


@pytest.mark.parametrize("transport", ["shm", "udp"])
def test_ranks_that_run_their_nodes_kernels_exchange_every_message(run_base, transport):
    """kernel="rank": each rank is its node (no node process); every message of an
    all-to-all arrives in order, each rank reports its own node's statistics, and nothing
    of the cluster it brought up is left."""
    before = set(os.listdir("/dev/shm"))
    results, stats = run_real_spmd(all_to_all, nodes=3, transport=transport, kernel="rank", timeout=TIMEOUT)
    for rank, got in enumerate(results):
        assert set(got) == set(range(3)) - {rank}
        for peer, msgs in got.items():
            assert msgs == [f"{peer}->{rank}#{k}" for k in range(20)]
    for rank in range(3):
        dev = next(v for k, v in stats[f"node{rank}"].items() if isinstance(v, dict) and "rx_frames" in v)
        assert dev["rx_frames"] >= 2 * 20                       # its own NIC took its peers' messages
    assert set(os.listdir("/dev/shm")) <= before


def test_a_rank_kernel_over_packet_between_namespaces(run_base):
    from kernelsim.media.netns import NetnsCluster
    from pyroute2 import netns
    from libdp._realprograms import round_trips
    ok, why = NetnsCluster.available()
    if not ok:
        pytest.skip(why)
    c = cluster_up(2, name=f"rk{os.getpid()}", transport="packet", tied=True, start=False)
    made = list(c.extra["namespaces"])
    try:
        assert [node_status(c, n)["state"] for n in c.nids()] == ["down", "down"]
        results, stats = run_real_spmd(round_trips, 200, nodes=2, cluster=c.path, kernel="rank", timeout=TIMEOUT)
    finally:
        cluster_down(c)
    assert len(results[0]) == 200 and all(ns > 0 for ns in results[0]) and results[1] is None
    for n in ("node0", "node1"):
        port = stats[n]["real_port0"]
        assert port["transport"]["received"] >= 200                         # off the AF_PACKET socket
        assert port["transport"]["sent"] == port["tx_frames"] >= 200         # by C, counted on the socket's port
    assert made and not set(made) & set(netns.listnetns())
    assert not os.path.exists(c.run_dir) and _shm_entries(c.name) == []


def test_a_rank_cannot_be_a_node_a_node_process_serves(two):
    """The transport is the running node's: EBUSY, and the cluster is as it was."""
    from libdp._realprograms import round_trips
    with pytest.raises(OSError) as e:
        run_real_spmd(round_trips, 10, nodes=2, cluster=two.path, kernel="rank", timeout=TIMEOUT)
    assert e.value.errno == errno.EBUSY and "is running" in str(e.value)
    assert [node_status(two, n)["state"] for n in two.nids()] == ["up", "up"]
    with pytest.raises(OSError) as e:
        run_real_spmd(round_trips, 10, kernel="kernel")
    assert e.value.errno == errno.EINVAL and "node, rank" in str(e.value)


def test_dp_pingpong_with_kernel_rank_and_its_refusals(run_base, capsys):
    assert main(["pingpong", "--real", "--kernel", "rank", "--sizes", "1,64", "--iters", "30", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["time"] == "real" and [r["size"] for r in doc["results"]] == [1, 64]
    assert all(r["rtt_us"] > 0 for r in doc["results"])
    # Two tasks of one rank (bibw's sender and receiver) wait on the same in-process node:
    # one sleeps on its ports, the other parks (trio lets one task wait on a descriptor).
    assert main(["bibw", "--real", "--kernel", "rank", "--sizes", "64", "--iters", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["size"] for r in doc["results"]] == [64] and doc["results"][0]["mbytes_per_s"] > 0
    assert main(["pingpong", "--kernel", "rank"]) == 1
    assert "--kernel chooses where a real node's kernel runs: use it with --real" in capsys.readouterr().err
    assert main(["pingpong", "--real", "--kernel", "rank", "--cluster", "x.toml"]) == 1
    assert "--kernel rank" in capsys.readouterr().err


# --------------------------------------------------------------------------- protocol modules on real nodes


EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "examples", "all_to_all.py")


def test_the_readme_flow_am_among_four_nodes(run_base, capsys):
    """Up, insmod am, an attached script per node exchanging AMs with all others, rmmod, down."""
    name = f"flow{os.getpid()}"
    assert main(["cluster", "up", "--nodes", "4", "--nic", "tb2", "--name", name]) == 0
    c_path = os.path.join(run_base, name, "cluster.toml")
    try:
        assert main(["insmod", "am", "--node", "all", "--cluster", c_path]) == 0
        out = subprocess.run([sys.executable, "-m", "libdp._cli", "run", "-n", "4", "--cluster", c_path, EXAMPLE, "5"],
                             capture_output=True, text=True, timeout=TIMEOUT)
        assert out.returncode == 0, out.stderr
        # Four processes share the pipe: find each report wherever it landed, and show
        # everything they printed if one is missing.
        reports = dict(re.findall(r"node (\d): (15 messages from 3 peers, [a-zA-Z ]+),", out.stdout))
        assert sorted(reports) == ["0", "1", "2", "3"], (out.stdout, out.stderr)
        assert set(reports.values()) == {"15 messages from 3 peers, all in order"}, out.stdout
        assert main(["rmmod", "am", "--node", "all", "--cluster", c_path]) == 0
        capsys.readouterr()
        assert main(["lsmod", "--node", "0", "--cluster", c_path, "--json"]) == 0
        assert [m["name"] for m in json.loads(capsys.readouterr().out)["0"]] == ["tb2", "dp"]   # DP back
    finally:
        assert main(["cluster", "down", "--cluster", c_path]) == 0
    assert not os.path.exists(os.path.join(run_base, name)) and _shm_entries(name) == []


def test_cluster_up_honours_dp_run_dir_as_the_other_commands_do(run_base, tmp_path, monkeypatch, capsys):
    """`export DP_RUN_DIR=...` (as `dp cluster up` prints it) names one cluster for every command:
    up must make it there, or status/down/run look where nothing is."""
    name = f"env{os.getpid()}"
    run_dir = str(tmp_path / name)
    monkeypatch.setenv("DP_RUN_DIR", run_dir)
    assert main(["cluster", "up", "--nodes", "2"]) == 0
    try:
        assert os.path.exists(os.path.join(run_dir, "cluster.toml"))
        assert not os.path.exists(os.path.join(run_base, "default"))
        capsys.readouterr()
        assert main(["cluster", "status", "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert status["run_dir"] == run_dir and status["cluster"] == name
    finally:
        assert main(["cluster", "down"]) == 0
    assert not os.path.exists(run_dir) and _shm_entries(name) == []


def test_am_pingpong_on_real_nodes(run_base, capsys):
    assert main(["am-pingpong", "--real", "--sizes", "1,2", "--iters", "30", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["time"] == "real" and [r["words"] for r in doc["results"]] == [1, 2]
    assert all(r["rtt_us"] > 0 for r in doc["results"])
    assert main(["am-pingpong", "--transport", "udp"]) == 1            # a real-mode option without --real
    assert "--transport: use it with --real" in capsys.readouterr().err


@pytest.mark.parametrize("nic", ["myrinet", "atm", "tb2"])
def test_dp_on_real_nodes_of_every_nic(run_base, nic):
    """Every NIC model runs on a real transport (a Myrinet NI once took the port's fault
    hook for a fabric's inject and sent nothing)."""
    from libdp import pingpong
    results, stats = run_real_spmd(pingpong, [1, 200], 20, nic=nic, timeout=TIMEOUT)
    assert [r["size"] for r in results[0]] == [1, 200]
    assert all(r["rtt_us"] > 0 for r in results[0])


def test_nowait_calls_take_what_is_there_and_never_wait(two):
    """dp_read_nowait / dp_write_nowait (for loops that checkpoint once per batch): None at
    once on an empty endpoint, every message in order once they are there, the same errnos;
    dp_read_polled the same after the process's poll."""
    a, b = attach(node=1), attach(node=0)     # node 0 receives: an earlier test may leave node 1's pools at 8 slots
    try:
        fa, fb = a.sync.dp_open(7), b.sync.dp_open(7)
        a.sync.dp_target(fa, 0, 7)
        assert b.dp_read_nowait(fb) is None
        # Batches of 4, each read before the next: DP drops what a full pool cannot take.
        sent, got = [f"m{k}".encode() for k in range(20)], []
        for k in range(0, len(sent), 4):
            assert all(a.dp_write_nowait(fa, m) for m in sent[k:k + 4])
            deadline = time.monotonic() + TIMEOUT
            while len(got) < k + 4 and time.monotonic() < deadline:
                if not select.select([fb], [], [], 1.0)[0]:
                    continue
                while (m := b.dp_read_nowait(fb, 2)) is not None:
                    got.append(m)
        assert got == [m[:2] for m in sent], b.link.admin("stats")["dp"]
        assert b.dp_read_nowait(fb) is None
        assert select.select([fb], [], [], 0)[0] == []          # the fd follows what is left: nothing
        with pytest.raises(OSError) as e:
            b.dp_read_nowait(12345)
        assert e.value.errno == errno.EBADF
        with pytest.raises(OSError) as e:
            a.dp_write_nowait(fa, b"x" * 100000)
        assert e.value.errno == errno.EMSGSIZE
        # dp_read_polled: the same after polling as long as the process's waits poll -- never a sleep.
        assert b.dp_read_polled(fb) is None
        assert a.dp_write_nowait(fa, b"polled")
        assert select.select([fb], [], [], TIMEOUT)[0]
        assert b.dp_read_polled(fb, 4) == b"poll"
        with pytest.raises(OSError) as e:
            b.dp_read_polled(12345)
        assert e.value.errno == errno.EBADF
        with pytest.raises(OSError) as e:
            b.dp_read_polled(fb, -1)
        assert e.value.errno == errno.EINVAL
        a.sync.close(fa)
        b.sync.close(fb)
    finally:
        a.detach()
        b.detach()


def _read_within(dp, fd, n):
    got, deadline = [], time.monotonic() + TIMEOUT
    while len(got) < n and time.monotonic() < deadline:
        if select.select([fd], [], [], 1.0)[0]:
            while (m := dp.dp_read_nowait(fd)) is not None:
                got.append(m)
    return got


def test_gate_payloads_of_one_size_arrive_intact(two):
    """The node fills one payload object again for the next gate entry when nothing kept
    the last (kernelsim.daemon._server._payload_of): distinct messages of one size, to
    another node and to the node's own endpoint (a local delivery), arrive as sent; once
    an endpoint is closed its no-wait calls are EBADF (libdp._endpoint_rings.EndpointTable)."""
    a, b = attach(node=0), attach(node=1)
    try:
        fa, fl, fb, fo = a.sync.dp_open(8), a.sync.dp_open(9), b.sync.dp_open(8), a.sync.dp_open(10)
        a.sync.dp_target(fa, 1, 8)
        a.sync.dp_target(fo, 0, 9)                # node 0's own endpoint 9
        sent = [bytes([k]) * 600 for k in range(1, 5)]
        for m in sent:
            assert a.dp_write_nowait(fa, m) and a.dp_write_nowait(fo, m)
        assert _read_within(b, fb, len(sent)) == sent
        assert _read_within(a, fl, len(sent)) == sent
        for dp, fd in ((a, fa), (a, fl), (b, fb), (a, fo)):
            dp.sync.close(fd)
        with pytest.raises(OSError) as e:
            a.dp_write_nowait(fa, b"x")
        assert e.value.errno == errno.EBADF
        with pytest.raises(OSError) as e:
            b.dp_read_nowait(fb)
        assert e.value.errno == errno.EBADF
    finally:
        a.detach()
        b.detach()


@pytest.mark.parametrize("program", ["bandwidth", "bibw"])
def test_window_bandwidth_on_real_nodes_counts_every_message(two, program):
    """libdp.bandwidth / bibw on real nodes (the batched no-wait loops): every message of
    every window is delivered and acknowledged on one host's shared memory."""
    from libdp import _bench
    # Windows of 4: an earlier test may leave node 1's pools at 8 slots, and DP drops what a
    # full pool cannot take (the benchmark counts it; here nothing may be lost).
    results, _ = run_real_spmd(getattr(_bench, program), [64, 1500], 5, 4, cluster=two.path, timeout=TIMEOUT)
    rows = _bench.merge_window_results(results, True)
    assert [r["size"] for r in rows] == [64, 1500]
    for r in rows:
        assert r["messages"] == (2 if program == "bibw" else 1) * 5 * 4
        assert r["delivered"] == r["messages"] and r["unacked_windows"] == 0
        assert r["mbytes_per_s"] > 0


@pytest.mark.parametrize("kernel", ["node", "rank"])
def test_trio_round_trips_through_attached_scripts_and_rank_kernels(run_base, kernel):
    """The trio calls' ping-pong (bench_real_nodes' trio row) completes every round trip,
    with the scripts' reads sleeping where trio would (`kernelsim.sleep_until_readable`)."""
    from libdp._realprograms import trio_round_trips
    c = cluster_up(2, name=f"tr{kernel[0]}{os.getpid()}", tied=True, start=(kernel == "node"))
    try:
        results, _ = run_real_spmd(trio_round_trips, 300, nodes=2, cluster=c.path, kernel=kernel, timeout=TIMEOUT)
    finally:
        cluster_down(c)
    assert len(results[0]) == 300 and all(ns > 0 for ns in results[0]) and results[1] is None
    assert not os.path.exists(c.run_dir) and _shm_entries(c.name) == []


def test_a_burst_of_frames_is_one_interrupt_and_a_small_ring_loses_none():
    """A real node's port takes a burst in before it runs the engine (libdp._cluster's
    REAL_RX_BURST): one receive interrupt for the burst -- but never more frames than the
    card has free buffers for (`FrameSink.rx_room`), so a 4-descriptor ring misses none."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    try:
        import bench_node_pass
    finally:
        sys.path.pop(0)
    out = bench_node_pass.run(64, 1500, 16, quiet=True)
    assert (out["delivered"], out["rx_missed"], out["rx_interrupts"]) == (64, 0, 4)
    out = bench_node_pass.run(64, 1500, 16, quiet=True, load=["dec21140:rx_ring=4"])
    assert (out["delivered"], out["rx_missed"]) == (64, 0)
    assert out["rx_interrupts"] < 64


@pytest.mark.parametrize("retry", ["1", "0"], ids=["retried", "parked"])
def test_a_transmit_ring_smaller_than_a_drains_burst_sends_every_message(monkeypatch, retry):
    """The node drain runs the devices after a burst of gate entries, not after each
    (kernelsim.daemon._server.GATE_SETTLE): with a 2-descriptor transmit ring an entry that
    finds it full because the ones before it were not sent yet has them sent and goes on
    (it neither waits nor fails) -- every message of the stream arrives. With that retry
    off (DP_GATE_RETRY=0, inherited by the node processes) the entry parks on the ring's
    wait queue and is run again from the node's loop once the transmit interrupt frees a
    descriptor: every message still arrives (run from inside that interrupt's event, it
    failed with EDEADLK)."""
    from libdp import bandwidth
    monkeypatch.setenv("DP_GATE_RETRY", retry)
    results, _ = run_real_spmd(bandwidth, [1500], 8, 64, nodes=2, load=["dec21140:tx_ring=2"], timeout=120.0)
    row = results[0][0]
    assert (row["delivered"], row["messages"], row["unacked_windows"]) == (512, 512, 0)
