import argparse
import os
import time

import jwt
import pytest

from sunk.slurm.auth import SignedToken, StaticToken, TokenFile, WatchedToken, token_source, token_times
from sunk.slurm.errors import AuthenticationFailed, SlurmError


def bump_mtime(path, seconds):
    t = time.time() + seconds
    os.utime(path, (t, t))


def test_static_token_is_stripped_and_must_not_be_empty():
    assert StaticToken(" abc\n").token() == "abc"
    with pytest.raises(ValueError):
        StaticToken("  ")


def test_token_file_is_read_once_until_it_changes(tmp_path, monkeypatch):
    path = tmp_path / "jwt"
    path.write_text("one\n")
    source = TokenFile(path)
    assert source.token() == "one"
    reads = []
    real = type(path).read_text
    monkeypatch.setattr(type(path), "read_text", lambda self, *a, **k: reads.append(1) or real(self, *a, **k))
    for _ in range(10):
        assert source.token() == "one"
    assert reads == []  # only stat() while unchanged
    path.write_text("two\n")
    bump_mtime(path, 5)
    assert source.token() == "two" and len(reads) == 1


def test_token_file_keeps_the_last_token_through_a_bad_moment(tmp_path):
    path = tmp_path / "jwt"
    path.write_text("one")
    source = TokenFile(path)
    assert source.token() == "one"
    path.write_text("")  # mid-rewrite
    bump_mtime(path, 5)
    assert source.token() == "one"
    path.unlink()
    assert source.token() == "one"
    path.write_text("two")
    bump_mtime(path, 10)
    assert source.token() == "two"


def test_missing_token_file_without_a_previous_token_is_an_error(tmp_path):
    with pytest.raises(SlurmError, match="cannot read the Slurm JWT file"):
        TokenFile(tmp_path / "nope").token()


def test_signed_tokens_are_hs256_for_the_user_and_renewed_at_half_life():
    now = [1000.0]
    source = SignedToken(b"k" * 32, "slurm", lifespan=100, clock=lambda: now[0])
    first = source.token()
    claims = jwt.decode(first, b"k" * 32, algorithms=["HS256"], options={"verify_exp": False})
    assert claims == {"iat": 1000, "exp": 1100, "sun": "slurm"}
    now[0] = 1049
    assert source.token() == first
    now[0] = 1050
    second = source.token()
    assert second != first
    assert jwt.decode(second, b"k" * 32, algorithms=["HS256"], options={"verify_exp": False})["exp"] == 1150


def test_signing_key_from_file(tmp_path):
    key = tmp_path / "jwt.key"
    key.write_bytes(b"s" * 32)
    token = token_source(jwt_key_file=key, user="root").token()
    assert jwt.decode(token, b"s" * 32, algorithms=["HS256"])["sun"] == "root"
    with pytest.raises(SlurmError, match="cannot read the Slurm JWT key"):
        token_source(jwt_key_file=tmp_path / "missing")


def test_exactly_one_source():
    with pytest.raises(ValueError, match="exactly one"):
        token_source()
    with pytest.raises(ValueError, match="exactly one"):
        token_source(token="a", jwt_key=b"k")


def test_a_token_file_replaced_by_a_new_file_is_read_even_with_the_same_size_and_mtime(tmp_path):
    """A Secret volume swaps in a new file: a new inode, perhaps in the same second and of the same size."""
    path = tmp_path / "jwt"
    path.write_text("one")
    source = TokenFile(path)
    assert source.token() == "one"
    stat = path.stat()
    new = tmp_path / "jwt.new"
    new.write_text("two")
    os.utime(new, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    keep = tmp_path / "jwt.old"
    os.link(path, keep)  # (the old inode stays allocated, so the new file cannot reuse its number)
    os.replace(new, path)
    assert source.token() == "two"


def test_a_rotated_signing_key_signs_at_once(tmp_path):
    key = tmp_path / "jwt.key"
    key.write_bytes(b"a" * 32)
    source = token_source(jwt_key_file=key, user="root")
    first = source.token()
    jwt.decode(first, b"a" * 32, algorithms=["HS256"])
    key.write_bytes(b"b" * 32)
    bump_mtime(key, 5)
    second = source.token()
    assert jwt.decode(second, b"b" * 32, algorithms=["HS256"])["sun"] == "root"


def test_a_signing_key_file_that_goes_keeps_the_last_key(tmp_path):
    key = tmp_path / "jwt.key"
    key.write_bytes(b"a" * 32)
    source = token_source(jwt_key_file=key, user="root")
    key.unlink()
    source.invalidate()
    jwt.decode(source.token(), b"a" * 32, algorithms=["HS256"])


def test_sources_say_where_their_tokens_come_from_never_the_token(tmp_path):
    key = tmp_path / "jwt.key"
    key.write_bytes(b"a" * 32)
    assert StaticToken("secret").describe() == "the fixed token given at start"
    assert TokenFile(tmp_path / "jwt").describe() == f"token file {tmp_path / 'jwt'}"
    assert token_source(jwt_key_file=key, user="slurm").describe() == f"tokens signed for slurm with key file {key}"


def test_token_times_are_read_without_verifying():
    token = jwt.encode({"iat": 100, "exp": 200}, b"k" * 32, algorithm="HS256")
    assert token_times(token) == (100.0, 200.0)
    assert token_times(jwt.encode({"sun": "root"}, b"k" * 32, algorithm="HS256")) is None  # no exp
    assert token_times("not-a-jwt") is None


def test_a_watched_token_warns_once_well_before_expiry_and_errors_once_after(caplog):
    now = [1000.0]
    token = jwt.encode({"iat": 0, "exp": 1000 + 1000, "sun": "root"}, b"k" * 32, algorithm="HS256")
    watched = WatchedToken(StaticToken(token), clock=lambda: now[0])  # 2000 s of life, 1000 left: quiet
    with caplog.at_level("WARNING", logger="sunk.slurm.auth"):
        watched.token()
        assert caplog.records == [] and watched.expires_at() == 2000.0
        now[0] = 1700  # 300 s left: under a fifth of the token's life
        watched.token()
        watched.token()
        assert [r.levelname for r in caplog.records] == ["WARNING"]
        assert "the fixed token given at start" in caplog.records[0].getMessage()
        now[0] = 2001
        watched.token()
        watched.token()
        assert [r.levelname for r in caplog.records] == ["WARNING", "ERROR"]


def test_a_signed_token_renewed_at_half_life_never_warns(caplog):
    now = [1000.0]
    watched = WatchedToken(SignedToken(b"k" * 32, "root", lifespan=100, clock=lambda: now[0]),
                           clock=lambda: now[0])
    with caplog.at_level("WARNING", logger="sunk.slurm.auth"):
        for _ in range(20):
            watched.token()
            now[0] += 10
    assert caplog.records == []


def test_a_key_file_that_may_come_later_is_an_outage_until_it_does_and_then_signs(tmp_path):
    """sunk-operator with its own SlurmCluster: the key Secret is its own to make, so the file is not there when
    its Pod starts. Without ``wait`` that is an error at the start; with it, each signing fails as an outage
    (``AuthenticationFailed``, retried) until the kubelet projects the file."""
    path = tmp_path / "jwt.key"
    with pytest.raises(SlurmError) as at_start:
        SignedToken.from_file(path, "slurm")
    assert not isinstance(at_start.value, AuthenticationFailed)
    tokens = SignedToken.from_file(path, "slurm", wait=True)
    with pytest.raises(AuthenticationFailed, match="not there yet"):
        tokens.token()
    path.write_bytes(b"")  # (projected, its key not yet written)
    with pytest.raises(AuthenticationFailed, match="empty"):
        tokens.token()
    path.write_bytes(b"k" * 32)
    bump_mtime(path, 1)
    claims = jwt.decode(tokens.token(), b"k" * 32, algorithms=["HS256"])
    assert claims["sun"] == "slurm"


def test_the_wait_for_a_key_file_is_a_flag_of_the_key_file_only():
    from sunk.slurm.settings import add_arguments, settings_from

    parser = argparse.ArgumentParser()
    add_arguments(parser, poll_interval=1.0, poll_help="")
    args = parser.parse_args(["--slurm-jwt-key-file=/k", "--slurm-jwt-key-wait"])
    assert settings_from(args, parser).jwt_key_wait is True
    with pytest.raises(SystemExit):
        settings_from(parser.parse_args(["--slurm-auth-token-file=/t", "--slurm-jwt-key-wait"]), parser)
