"""The dataset registry and loader: mirror, cache, download with checksum, clear errors."""
import functools
import hashlib
import http.server
import socket
import threading

import pytest

from utils import data

SAMPLE = b"To be, or not to be: purple cats are great.\n" * 50


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No mirror, an empty cache, and a registry entry `sample` served from loopback."""
    monkeypatch.delenv("COURSE_DATA_DIR", raising=False)
    monkeypatch.delenv("COURSE_OFFLINE", raising=False)
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    served = tmp_path / "served"
    served.mkdir()
    (served / "sample.txt").write_bytes(SAMPLE)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    entry = {
        "filename": "sample.txt",
        "url": f"http://127.0.0.1:{server.server_port}/sample.txt",
        "sha256": hashlib.sha256(SAMPLE).hexdigest(),
        "bytes": len(SAMPLE),
        "license": "test",
        "description": "test",
    }
    registry = {**data.registry(), "sample": entry}
    monkeypatch.setattr(data, "registry", lambda: registry)
    yield entry
    server.shutdown()


@pytest.fixture
def closed_url():
    """A loopback URL that refuses connections: a port this test holds bound and never listens on."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}/closed-port.txt"


def test_registry_entries_are_complete():
    for name, entry in data.registry().items():
        assert set(entry) >= {"filename", "url", "sha256", "bytes", "license"}, name
        assert len(entry["sha256"]) == 64 and entry["url"].startswith("https://"), name


def test_loads_tiny_shakespeare_from_the_offline_mirror():
    if not data.os.environ.get("COURSE_DATA_DIR"):
        pytest.skip("no offline mirror (../shared/datasets) beside this clone")
    text = data.load_text("tinyshakespeare")
    assert len(text.encode("utf-8")) == data.entry("tinyshakespeare")["bytes"]
    assert text.startswith("First Citizen:")


def test_downloads_verifies_and_then_uses_the_cache(isolated, tmp_path, closed_url):
    assert data.load_text("sample") == SAMPLE.decode()
    cached = tmp_path / "cache" / "sample.txt"
    assert cached.read_bytes() == SAMPLE
    isolated["url"] = closed_url  # the cache must serve it now
    assert data.dataset_path("sample") == cached


def test_a_download_with_the_wrong_checksum_is_refused(isolated, tmp_path):
    isolated["sha256"] = "0" * 64
    with pytest.raises(data.DatasetUnavailable, match="download failed"):
        data.dataset_path("sample")
    assert not (tmp_path / "cache" / "sample.txt").exists()


def test_a_corrupt_cached_file_is_replaced(isolated, tmp_path):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "sample.txt").write_bytes(b"truncated")
    assert data.dataset_path("sample").read_bytes() == SAMPLE


def test_offline_without_a_copy_names_the_url_and_the_path_to_fill(isolated, monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_OFFLINE", "1")
    with pytest.raises(data.DatasetUnavailable) as info:
        data.load_text("sample")
    message = str(info.value)
    assert isolated["url"] in message
    assert str(tmp_path / "cache" / "sample.txt") in message
    assert "COURSE_DATA_DIR" in message


def test_no_network_is_a_clear_error_and_the_fallback_keeps_the_notebook_going(isolated, capsys, closed_url):
    isolated["url"] = closed_url
    with pytest.raises(data.DatasetUnavailable, match="Fix: download"):
        data.load_text("sample")
    assert data.load_text("sample", fallback="small text") == "small text"
    assert "built-in text" in capsys.readouterr().out


def test_a_mirror_with_a_wrong_file_is_reported(isolated, monkeypatch, tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "sample.txt").write_bytes(b"something else")
    monkeypatch.setenv("COURSE_DATA_DIR", str(mirror))
    monkeypatch.setenv("COURSE_OFFLINE", "1")
    with pytest.raises(data.DatasetUnavailable, match="wrong sha256"):
        data.dataset_path("sample")


def test_unknown_dataset_lists_the_known_ones():
    with pytest.raises(KeyError, match="tinyshakespeare"):
        data.load_text("no-such-data")


def test_reachable_sees_a_listening_port_and_not_a_closed_one_nor_any_when_offline(monkeypatch):
    monkeypatch.delenv("COURSE_OFFLINE", raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert data.reachable("127.0.0.1", port, timeout_s=2)
        monkeypatch.setenv("COURSE_OFFLINE", "1")
        assert not data.reachable("127.0.0.1", port, timeout_s=2)
    monkeypatch.delenv("COURSE_OFFLINE")
    with socket.socket() as held:  # bound, never listening: the connection is refused
        held.bind(("127.0.0.1", 0))
        assert not data.reachable("127.0.0.1", held.getsockname()[1], timeout_s=2)
