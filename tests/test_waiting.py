"""Waiting on a pipe works whatever the descriptor's number: select() refuses 1024 and above,
and the CI's pytest process once held that many files when the fork server started."""
import os
import resource
import time

import pytest

from autograder.isolation.waiting import readable_within


@pytest.fixture
def high_pipe():
    """A pipe whose read end is numbered above 1024 (raising this process's soft limit if needed)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2100:
        pytest.skip(f"this machine allows only {hard} open files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2100), hard))
    read_end, write_end = os.pipe()
    high_read, high_write = os.dup2(read_end, 2000), os.dup2(write_end, 2001)
    os.close(read_end)
    os.close(write_end)
    yield high_read, high_write
    for fd in (high_read, high_write):
        try:
            os.close(fd)
        except OSError:
            pass
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_an_empty_pipe_is_not_readable_and_the_wait_ends_on_time(high_pipe):
    read_end, _ = high_pipe
    start = time.monotonic()
    assert readable_within(read_end, 0.2) is False
    assert 0.15 <= time.monotonic() - start < 5
    assert readable_within(read_end, 0) is False


def test_a_pipe_with_data_or_a_closed_writer_is_readable(high_pipe):
    read_end, write_end = high_pipe
    os.write(write_end, b"listening\n")
    assert readable_within(read_end, 1) is True
    assert os.read(read_end, 100) == b"listening\n"
    os.close(write_end)
    assert readable_within(read_end, None) is True  # end of file: read() returns b""
    assert os.read(read_end, 100) == b""


def test_a_file_object_is_accepted(high_pipe):
    read_end, write_end = high_pipe
    with os.fdopen(os.dup(read_end), "rb", buffering=0) as reader:
        os.write(write_end, b"x")
        assert readable_within(reader, 1) is True
