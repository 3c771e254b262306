import os
import time

import jwt
import pytest

from sunk.slurm.auth import SignedToken, StaticToken, TokenFile, token_source
from sunk.slurm.errors import SlurmError


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
