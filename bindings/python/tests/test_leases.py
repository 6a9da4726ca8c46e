"""Export leases, ranges and pool-block exports (ABI 1.5): a sender lets go of a buffer it
exported under a lease and the receiver keeps reading it, until its own import goes; a
sender killed with SIGKILL revokes everything it exported and the device gets every byte
back; a pool block is exported alone. Clients of one shared davinci-mockd device, the
sender in another process where it matters."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import davinci
from davinci import task


def _sender(path: str) -> subprocess.Popen:
    """A process that allocates 256 KiB, fills it with 0..65535 (u32), exports it under a
    lease, prints the token, then on each line of stdin: 'drop' lets go of the buffer,
    'hold' allocates and exports another without letting go, 'exit' ends."""
    code = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        import davinci
        dev = davinci.Device({path!r})
        buf = dev.alloc(256 << 10)
        np.asarray(buf).view(np.uint32)[:] = np.arange(64 << 10, dtype=np.uint32)
        print(buf.export(lease=True), flush=True)
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "drop":
                buf.close()
                print("dropped", flush=True)
            elif cmd == "hold":
                held = dev.alloc(1 << 20)
                print(held.export(lease=True), flush=True)
            elif cmd == "exit":
                break
        """
    )
    env = dict(os.environ)
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def _eventually(cond, timeout: float = 10.0) -> bool:
    """Whether `cond()` holds within `timeout` seconds (the daemon learns of a killed client
    when it reads the closed connection: soon, not at once)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def _say(p: subprocess.Popen, line: str) -> str:
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(line + "\n")
    p.stdin.flush()
    return p.stdout.readline().strip()


def test_a_leased_buffer_outlives_the_senders_close_until_the_receiver_lets_go(mockd) -> None:
    dev = davinci.Device(mockd.path(0))
    base = dev.memory_used()
    sender = _sender(mockd.path(0))
    try:
        assert sender.stdout is not None
        token = sender.stdout.readline().strip()
        theirs = dev.import_buffer(token)
        assert _say(sender, "drop") == "dropped"
        # The sender let go; the receiver still reads and copies the data.
        assert not theirs.is_revoked()
        expect = np.arange(64 << 10, dtype=np.uint32)
        assert (np.asarray(theirs).view(np.uint32) == expect).all()
        out = dev.alloc(256 << 10)
        s = dev.create_context().create_stream()
        s.submit(task.copy(out, theirs))
        s.synchronize(timeout=10)
        assert (np.asarray(out).view(np.uint32) == expect).all()
        assert dev.memory_used() == base + 2 * (256 << 10), "still charged"
        # No new import once the sender freed it.
        other = davinci.Device(mockd.path(0))
        with pytest.raises(davinci.DavinciError) as e:
            other.import_buffer(token)
        assert davinci.errno_name(e.value.errno) == "ENOENT"
        theirs.close()
        out.close()
        assert dev.memory_used() == base, "the receiver's close ended the lease"
    finally:
        _say(sender, "exit")
        sender.wait(timeout=30)


def test_a_sender_killed_mid_pipeline_revokes_its_leases_and_every_byte_comes_back(
    mockd,
) -> None:
    dev = davinci.Device(mockd.path(0))
    base = dev.memory_used()
    sender = _sender(mockd.path(0))
    assert sender.stdout is not None
    first = dev.import_buffer(sender.stdout.readline().strip())
    second = dev.import_buffer(_say(sender, "hold"))
    assert _say(sender, "drop") == "dropped"
    sender.send_signal(signal.SIGKILL)
    sender.wait(timeout=30)
    # The daemon notices the closed connection; the imports are revoked, with a clear error
    # for a task that names them, and the memory is the device's again.
    for imp in (first, second):
        assert _eventually(imp.is_revoked)
    s = dev.create_context().create_stream()
    s.submit(task.fill(first, 1))
    with pytest.raises(davinci.DavinciError) as e:
        s.synchronize(timeout=10)
    assert "EACCES" in str(e.value)
    first.close()
    second.close()
    assert _eventually(lambda: dev.memory_used() == base), (dev.memory_used(), base)


def test_a_pool_block_is_exported_alone(mockd) -> None:
    a, b = davinci.Device(mockd.path(0)), davinci.Device(mockd.path(0))
    page = int(a.info["page_size"])
    small = davinci.MemPool(a)
    with pytest.raises(davinci.DavinciError) as e:
        small.alloc(256).export(lease=True)
    assert "align" in str(e.value)
    pool = davinci.MemPool(a, align=page)
    first, second = pool.alloc(page), pool.alloc(page)
    np.asarray(second)[:] = 7
    theirs = b.import_buffer(second.export(lease=True))
    assert theirs.nbytes == page and theirs.dev_addr == second.dev_addr
    second.close()
    assert pool.stats()["leased_blocks"] == 1
    assert (np.asarray(theirs) == 7).all()
    theirs.close()
    pool.trim()
    assert pool.stats()["leased_blocks"] == 0
    # A range of a buffer, and unexport.
    buf = a.alloc(4 * page)
    imp = b.import_buffer(buf.export(offset=page, nbytes=page))
    assert imp.dev_addr == buf.dev_addr + page
    assert buf.unexport(offset=page, nbytes=page) == 0
    assert imp.is_revoked()
    first.close()
