"""sunk/commands/web.py: each listener its own TLS and its own app, in a real gunicorn.

The extender's verbs port runs mutual TLS and its hook port plain HTTP (the chart's sunk-extender).
gunicorn alone wraps every listener in the one TLS it is given: the hook port then answered
nothing to the placeholders' plain-HTTP calls, and they drained their nodes.
"""

from __future__ import annotations

import ssl

import pytest
import requests
from web_fakes import certificates, served_in_a_child

from sunk.commands.web import TLS, Listener, check_listeners, gunicorn_options, tls_from_flags

VERBS, HOOKS = 18988, 18989


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def server(certs):
    server = certs["server"]
    listeners = [Listener(f"127.0.0.1:{VERBS}", "verbs", TLS(str(server.cert), str(server.key), str(server.ca))),
                 Listener(f"127.0.0.1:{HOOKS}", "hooks")]
    with served_in_a_child(listeners, 2, ready_port=HOOKS):
        yield


def test_the_plain_listener_answers_plain_http_with_its_own_app(server):
    answer = requests.get(f"http://127.0.0.1:{HOOKS}/who", timeout=5)
    assert answer.status_code == 200 and answer.json() == {"app": "hooks"}


def test_the_tls_listener_answers_a_client_with_a_certificate_of_its_ca(server, certs):
    client = certs["client"]
    answer = requests.get(f"https://127.0.0.1:{VERBS}/who", timeout=5, verify=str(certs["ca"].cert),
                          cert=(str(client.cert), str(client.key)))
    assert answer.status_code == 200 and answer.json() == {"app": "verbs"}


def test_the_tls_listener_refuses_clients_without_a_certificate_of_its_ca(server, certs):
    stranger = certs["stranger"]
    for cert in (None, (str(stranger.cert), str(stranger.key))):
        with pytest.raises(requests.exceptions.RequestException):
            requests.get(f"https://127.0.0.1:{VERBS}/who", timeout=5, verify=str(certs["ca"].cert), cert=cert)


def test_the_tls_listener_does_not_speak_plain_http(server):
    with pytest.raises(requests.exceptions.RequestException):
        requests.get(f"http://127.0.0.1:{VERBS}/who", timeout=5)


def test_a_bad_certificate_file_fails_at_start_naming_it(tmp_path):
    missing = str(tmp_path / "missing.crt")
    with pytest.raises((OSError, ssl.SSLError)):
        gunicorn_options([Listener("127.0.0.1:1", "verbs", TLS(missing, missing))], threads=1, timeout=1)


def test_listeners_must_differ_in_port_and_name_one():
    with pytest.raises(ValueError, match="both listen on port 8000"):
        check_listeners([Listener(":8000", "verbs"), Listener("127.0.0.1:8000", "hooks")])
    with pytest.raises(ValueError, match="explicit port"):
        check_listeners([Listener(":0", "hooks")])


def test_tls_flags_go_together():
    assert tls_from_flags("", "", what="x") is None
    assert tls_from_flags("c", "k", "ca", what="x") == TLS("c", "k", "ca")
    with pytest.raises(ValueError, match="go together"):
        tls_from_flags("c", "", what="the hook API")
    with pytest.raises(ValueError, match="needs TLS"):
        tls_from_flags("", "", "ca", what="the extender verbs")


def test_only_tls_listeners_make_gunicorn_use_tls():
    assert "certfile" not in gunicorn_options([Listener(":8000", "hooks")], threads=1, timeout=1)


def test_bind_addresses_are_go_style_and_ipv6_keeps_its_brackets():
    options = gunicorn_options([Listener(":8000", "hooks"), Listener("[::1]:8001", "verbs")], threads=1, timeout=1)
    assert options["bind"] == ["0.0.0.0:8000", "[::1]:8001"]
    with pytest.raises(ValueError, match="HOST:PORT"):
        check_listeners([Listener("hooks:http", "hooks")])


def test_gunicorns_control_socket_is_off_where_gunicorn_has_one():
    """gunicorn 25+ opens a control socket in $HOME, which the chart's read-only root refuses at every start."""
    from gunicorn.config import KNOWN_SETTINGS

    options = gunicorn_options([Listener(":8000", "hooks")], threads=1, timeout=1)
    if "control_socket_disable" in {s.name for s in KNOWN_SETTINGS}:
        assert options["control_socket_disable"] is True
    else:
        assert "control_socket_disable" not in options  # (older gunicorn would refuse the unknown setting)
