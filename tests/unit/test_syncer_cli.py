"""sunk-syncer's start-up refusals and its hook-token command."""

from __future__ import annotations

import attrs
import pytest

from sunk.commands.syncer import main, parse_args
from sunk.hooks.auth import node_token

SECRET = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


@pytest.mark.parametrize("content", ["", "REPLACE-ME", "replace-me\n", "short", "x" * 40])
def test_a_placeholder_or_weak_hooks_secret_refuses_to_start(tmp_path, capsys, content):
    token = tmp_path / "token"
    token.write_text(content)
    with pytest.raises(SystemExit) as exc:
        parse_args(["--slurm-auth-token=t", f"--hooks-token-file={token}"])
    assert exc.value.code == 2
    assert "--hooks-token-file" in capsys.readouterr().err


def test_a_missing_hooks_secret_file_refuses_to_start(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--slurm-auth-token=t", f"--hooks-token-file={tmp_path / 'missing'}"])
    assert "missing" in capsys.readouterr().err


def test_a_good_secret_starts(tmp_path):
    token = tmp_path / "token"
    token.write_text(SECRET + "\n")
    startup = parse_args(["--slurm-auth-token=t", f"--hooks-token-file={token}"])
    assert startup.args.hooks_token_file == str(token)


def test_without_node_locking_no_secret_is_needed(tmp_path):
    missing = f"--hooks-token-file={tmp_path / 'missing'}"
    assert parse_args(["--plugins=", "--slurm-auth-token=t", missing]).node_locking is None
    assert parse_args(["--node-locking=false", "--slurm-auth-token=t", missing]).node_locking is None


def test_node_locking_without_node_permissions_refuses_to_start(tmp_path, capsys):
    """A lock is a taint on the Node: without the right to write Nodes every lock would be a 403
    retried forever and every prolog a drain. Refused at start, saying what to change."""
    token = tmp_path / "token"
    token.write_text(SECRET)
    with pytest.raises(SystemExit) as exc:
        parse_args(["--slurm-auth-token=t", f"--hooks-token-file={token}", "--node-permissions-enabled=false"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--node-permissions-enabled=false" in err and "--plugins=sunk.metrics.plugin" in err
    assert "syncer.nodeLocking.enabled=false" in err


@pytest.mark.parametrize(("flags", "expected"), [([], True), (["--node-permissions-enabled"], True),
                                                 (["--node-permissions-enabled=false"], False)])
def test_node_permissions_without_node_locking_are_the_syncers_to_use(flags, expected):
    startup = parse_args(["--plugins=sunk.metrics.plugin", "--slurm-auth-token=t", *flags])
    assert startup.config.node_permissions is expected


def test_node_locking_cannot_be_assembled_without_node_permissions():
    from locking_fakes import Cache, Recorder, Store, config, context

    from sunk.locking.assembly import assemble

    ctx = context(Store(), Store(), Store(), Cache(), Recorder())
    denied = attrs.evolve(ctx, config=attrs.evolve(ctx.config, node_permissions=False))
    with pytest.raises(ValueError, match="node-permissions"):
        assemble(denied, config())


def test_hook_token_prints_each_nodes_own_token(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text(SECRET)
    assert main(["hook-token", f"--hooks-token-file={token}", "node1", "gpu-12-7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"node1 {node_token(SECRET.encode(), 'node1')}",
                     f"gpu-12-7 {node_token(SECRET.encode(), 'gpu-12-7')}"]
    assert node_token(SECRET.encode(), "node1") != node_token(SECRET.encode(), "node2")


def test_hook_token_refuses_a_weak_secret(tmp_path):
    token = tmp_path / "token"
    token.write_text("REPLACE-ME")
    with pytest.raises(SystemExit):
        main(["hook-token", f"--hooks-token-file={token}", "node1"])


def test_the_hook_api_serves_tls_with_both_files(tmp_path):
    from sunk.commands.syncer import hooks_listener

    token = tmp_path / "token"
    token.write_text(SECRET)
    startup = parse_args(["--slurm-auth-token=t", f"--hooks-token-file={token}", "--hooks-tls-cert-file=/c.pem",
                          "--hooks-tls-key-file=/k.pem"])
    listener = hooks_listener(startup.config)
    assert listener.tls is not None and (listener.tls.cert_file, listener.tls.key_file) == ("/c.pem", "/k.pem")
    plain = parse_args(["--slurm-auth-token=t", f"--hooks-token-file={token}"])
    assert hooks_listener(plain.config).tls is None


def test_a_certificate_without_its_key_refuses_to_start(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text(SECRET)
    with pytest.raises(SystemExit):
        parse_args(["--slurm-auth-token=t", f"--hooks-token-file={token}", "--hooks-tls-cert-file=/c.pem"])
    assert "certificate and its key" in capsys.readouterr().err


def test_the_pod_token_audience_reaches_node_locking(tmp_path):
    from sunk.locking.config import config_from

    token = tmp_path / "token"
    token.write_text(SECRET)
    assert config_from(parse_args(["--slurm-auth-token=t", f"--hooks-token-file={token}"]).args).token_audience \
        == "sunk-syncer"
    startup = parse_args(["--slurm-auth-token=t", f"--hooks-token-file={token}", "--hooks-token-audience="])
    assert config_from(startup.args).token_audience == ""


def test_without_a_hooks_secret_only_pod_tokens_open_nodes(tmp_path, capsys):
    """With only the slurmd Pods' ServiceAccount tokens, the Syncer starts with no HMAC secret at all (so none
    can be a master key for every node); with neither way to know a node, it refuses to start."""
    startup = parse_args(["--slurm-auth-token=t", "--hooks-token-file=", "--hooks-token-audience=sunk-syncer"])
    assert not startup.args.hooks_token_file
    with pytest.raises(SystemExit) as exc:
        parse_args(["--slurm-auth-token=t", "--hooks-token-file=", "--hooks-token-audience="])
    assert exc.value.code == 2 and "--hooks-token-audience" in capsys.readouterr().err
