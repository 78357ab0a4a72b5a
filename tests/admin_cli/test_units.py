"""The pure parts of `magnetar-admin`, from tables: units, message ids, Jackson's pretty print, client.conf
with flags over it, and Pulsar's authentication plugin names and parameter formats."""

from __future__ import annotations

import base64
import json

import pytest

from broker.admin_cli.output import jackson_pretty, render
from broker.admin_cli.params import parse_message_id, parse_relative_time_s, parse_size, timestamp_before
from broker.admin_cli.settings import (AdminCliError, authentication, authorization_header, read_client_conf,
                                       resolve, ssl_context)

MB = 1024 * 1024


@pytest.mark.parametrize("text, expected", [
    ("4096", 4096), ("100K", 100 * 1024), ("100k", 100 * 1024), ("10M", 10 * MB), ("16G", 16 * 1024 * MB),
    ("2T", 2 * 1024**4), ("-1", -1), ("0", 0),
])
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["ten", "1.5G", "", "-2", "G", "10X", "9" * 30])
def test_bad_sizes(text):
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize("text, seconds", [
    ("120", 120), ("30s", 30), ("100m", 6000), ("3h", 10800), ("2d", 172800), ("5w", 5 * 7 * 86400),
    ("1y", 365 * 86400), ("-1", -1), ("0", 0),
])
def test_relative_times(text, seconds):
    assert parse_relative_time_s(text) == seconds


@pytest.mark.parametrize("text", ["3q", "h", "1.5h", "-5", "", "9" * 30 + "y"])
def test_bad_relative_times(text):
    with pytest.raises(ValueError):
        parse_relative_time_s(text)


@pytest.mark.parametrize("text, expected", [
    ("12:3", {"ledgerId": 12, "entryId": 3}), ("-1:-1", {"ledgerId": -1, "entryId": -1}),
])
def test_message_ids(text, expected):
    assert parse_message_id(text) == expected


@pytest.mark.parametrize("text", ["12", "12:", "a:b", "1:2:3", f"{2**63}:0", "-2:0"])
def test_bad_message_ids(text):
    with pytest.raises(ValueError):
        parse_message_id(text)


def test_timestamp_before_uses_the_clock_given():
    assert timestamp_before(3600, now_s=10_000.5) == 6_400_500


@pytest.mark.parametrize("value, text", [
    ({}, "{ }"),
    ([], "[ ]"),
    ({"a": 1}, '{\n  "a" : 1\n}'),
    ({"a": [1, "x"], "b": {"c": None}}, '{\n  "a" : [ 1, "x" ],\n  "b" : {\n    "c" : null\n  }\n}'),
    ({"a": [{"b": 1}, {"c": True}]}, '{\n  "a" : [ {\n    "b" : 1\n  }, {\n    "c" : true\n  } ]\n}'),
    ({"ü": "ß"}, '{\n  "ü" : "ß"\n}'),
])
def test_jackson_pretty_print(value, text):
    assert jackson_pretty(value) == text
    assert json.loads(text) == value


@pytest.mark.parametrize("value, text", [
    (["a", "b"], "a\nb"),  # pulsar-admin prints a list one item per line
    ([], ""),
    ("ok", "ok"),
    (None, "null"),  # a policy that is not set
    (7, "7"),
    ([{"a": 1}], '{\n  "a" : 1\n}'),
])
def test_render(value, text):
    assert render(value) == text


# ---- settings: client.conf, flags over it --------------------------------------------------------------------


def test_flags_win_over_client_conf_and_serviceUrl_is_the_fallback(tmp_path):
    conf_file = tmp_path / "client.conf"
    conf_file.write_text("serviceUrl=http://old:8080\nauthPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
                         "authParams=token:abc\ntlsAllowInsecureConnection=true\n")
    conf = read_client_conf(conf_file)
    settings = resolve(conf)
    assert (settings.admin_url, settings.auth_params, settings.tls_allow_insecure) == ("http://old:8080", "token:abc", True)
    conf["webServiceUrl"] = "http://new:8080/"
    assert resolve(conf).admin_url == "http://new:8080"
    flagged = resolve(conf, admin_url="https://flag:8443", auth_params="token:def", tls_allow_insecure=False)
    assert (flagged.admin_url, flagged.auth_params, flagged.tls_allow_insecure) == ("https://flag:8443", "token:def", False)
    assert resolve({}).admin_url == "http://localhost:8080"


@pytest.mark.parametrize("conf, flags, message", [
    ({}, {"admin_url": "pulsar://x:6650"}, "must be http://host:port or https://host:port"),
    ({"tlsAllowInsecureConnection": "yes"}, {}, "tlsAllowInsecureConnection must be true or false"),
    ({"authParams": "token:x"}, {}, "--auth-params needs --auth-plugin"),
])
def test_bad_settings(conf, flags, message):
    with pytest.raises(AdminCliError, match=message):
        resolve(conf, **flags)


def test_unreadable_client_conf_names_the_file(tmp_path):
    with pytest.raises(AdminCliError, match="missing.conf"):
        read_client_conf(tmp_path / "missing.conf")
    bad = tmp_path / "bad.conf"
    bad.write_text("=novalue\n")
    with pytest.raises(AdminCliError, match="bad.conf:1"):
        read_client_conf(bad)


# ---- authentication plugins ------------------------------------------------------------------------------------

TOKEN_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
BASIC_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"
TLS_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationTls"


def test_token_parameter_forms(tmp_path):
    token_file = tmp_path / "token.txt"
    token_file.write_text("from-file\n")
    for plugin, params in [(TOKEN_CLASS, "token:abc"), ("AuthenticationToken", "abc"), (TOKEN_CLASS, '{"token": "abc"}')]:
        assert authorization_header(authentication(plugin, params)) == "Bearer abc"
    for params in (f"file://{token_file}", f"file:{token_file}"):
        assert authorization_header(authentication(TOKEN_CLASS, params)) == "Bearer from-file"


def test_basic_parameters_are_pulsars_userId_and_password():
    header = authorization_header(authentication(BASIC_CLASS, '{"userId": "admin", "password": "p:w"}'))
    assert header == "Basic " + base64.b64encode(b"admin:p:w").decode()


def test_tls_parameters_name_the_certificate_and_need_https():
    method = authentication(TLS_CLASS, "tlsCertFile:/c.pem,tlsKeyFile:/k.pem")
    assert method.client_certificate() == ("/c.pem", "/k.pem")
    assert authorization_header(method) is None
    with pytest.raises(AdminCliError, match="needs an https:// admin URL"):
        ssl_context(resolve({}), method)


@pytest.mark.parametrize("plugin, params, message", [
    ("org.example.MyAuth", "x", "unsupported --auth-plugin"),
    (BASIC_CLASS, '{"username": "a", "password": "b"}', "userId"),
    (BASIC_CLASS, "{not json", "not valid JSON"),
    (TLS_CLASS, "tlsCertFile:/c.pem", "tlsKeyFile"),
    (TOKEN_CLASS, "file:///no/such/token", "cannot read the token file"),
    (TOKEN_CLASS, '{"other": "x"}', '"token" key'),
])
def test_bad_authentication(plugin, params, message):
    with pytest.raises(AdminCliError, match=message):
        authorization_header(authentication(plugin, params))


def test_empty_token_is_refused_before_sending():
    with pytest.raises(AdminCliError, match="empty"):
        authorization_header(authentication(TOKEN_CLASS, "token:"))


def test_no_plugin_no_credentials():
    assert authentication(None, None) is None and authorization_header(None) is None
