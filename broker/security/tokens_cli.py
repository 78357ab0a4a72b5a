"""`broker tokens ...`: make keys and tokens, with the flags and defaults of `pulsar tokens`.

    broker tokens create-secret-key [-a HS256] [-o FILE] [-b]
    broker tokens create-key-pair [-a RS256|ES256] --output-private-key F --output-public-key F
    broker tokens create (-sk KEY | -pk KEY) -s ROLE [-e 1h] [-a ALG] [-hs k=v ...]
    broker tokens show [TOKEN | -i | -f FILE]            (or the TOKEN environment variable)
    broker tokens validate (-sk KEY | -pk KEY) [TOKEN | -i | -f FILE]

Keys are read and written in Pulsar's forms (broker/security/tokens.py), so a key made here works with
Pulsar's tools and the other way round. Key files are written readable by their owner only. Errors go to
stderr with exit status 1, as `pulsar tokens` does.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sys
import time
from pathlib import Path

from broker.errors import AuthenticationError
from broker.security import tokens

EXIT_FAILED = 1
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_RELATIVE_TIME = re.compile(r"^(\d+)([smhdwy]?)$")
MAX_EXPIRY_S = 1000 * 365 * 86400


def parse_relative_time(text: str) -> int:
    """Seconds in "10s", "5m", "1h", "3d", "2w", "10y" (a bare number is seconds), as Pulsar reads --expiry-time."""
    m = _RELATIVE_TIME.match(text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"invalid relative time {text!r}: use e.g. 30s, 10m, 1h, 3d, 2w, 1y")
    seconds = int(m.group(1)) * _UNIT_SECONDS[m.group(2) or "s"]
    if seconds > MAX_EXPIRY_S:
        raise argparse.ArgumentTypeError(f"expiry time {text!r} is more than 1000 years")
    return seconds


def _header(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"header {text!r}: expected key=value")
    return key, value


def add_parser(commands) -> None:
    """Adds ``tokens`` to the `broker` command's subparsers."""
    tokens_parser = commands.add_parser("tokens", help="create keys and tokens for token authentication")
    sub = tokens_parser.add_subparsers(dest="tokens_command", metavar="COMMAND", required=True)

    p = sub.add_parser("create-secret-key", help="a new secret key (raw bytes) for HS256 tokens")
    p.add_argument("-a", "--signature-algorithm", default="HS256", choices=tokens.HMAC_ALGORITHMS)
    p.add_argument("-o", "--output", help="write the key to this file instead of stdout")
    p.add_argument("-b", "--base64", action="store_true", help="encode the key in base64")

    p = sub.add_parser("create-key-pair", help="a new private/public key pair (DER) for RS256 or ES256 tokens")
    p.add_argument("-a", "--signature-algorithm", default="RS256",
                   choices=tokens.RSA_ALGORITHMS + tokens.EC_ALGORITHMS)
    p.add_argument("--output-private-key", required=True, help="file for the private key (PKCS#8 DER)")
    p.add_argument("--output-public-key", required=True, help="file for the public key (X.509 DER)")

    p = sub.add_parser("create", help="a new token for a role, printed on stdout")
    p.add_argument("-a", "--signature-algorithm", default=None, choices=tokens.SIGNATURE_ALGORITHMS,
                   help="default: the key's own (HS256 for a secret key, RS256 for RSA, ES256 for EC P-256)")
    p.add_argument("-s", "--subject", required=True, help="the role the token names")
    p.add_argument("-e", "--expiry-time", type=parse_relative_time,
                   help="relative expiry, e.g. 1h, 3d, 10y (default: no expiry)")
    p.add_argument("-sk", "--secret-key", help="signing secret key: file:///path, data:;base64,... or a path")
    p.add_argument("-pk", "--private-key", help="signing private key: file:///path, data:;base64,... or a path")
    p.add_argument("-hs", "--headers", type=_header, nargs="*", default=[], metavar="KEY=VALUE",
                   help="additional token headers")

    for name, text in (("show", "print a token's header and claims (not checked)"),
                       ("validate", "check a token against a key; print its claims")):
        p = sub.add_parser(name, help=text)
        p.add_argument("token", nargs="?", help="the token (or -i, -f, or the TOKEN environment variable)")
        p.add_argument("-i", "--stdin", action="store_true", help="read the token from stdin")
        p.add_argument("-f", "--token-file", help="read the token from a file")
        if name == "validate":
            p.add_argument("-a", "--signature-algorithm", default=None, help="accepted for compatibility; "
                           "the key decides")
            p.add_argument("-sk", "--secret-key", help="validating secret key")
            p.add_argument("-pk", "--public-key", help="validating public key")


def run(args) -> int:
    try:
        return _COMMANDS[args.tokens_command](args)
    except (ValueError, AuthenticationError, OSError) as exc:
        print(f"broker tokens {args.tokens_command}: {exc}", file=sys.stderr, flush=True)
        return EXIT_FAILED


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _create_secret_key(args) -> int:
    key = tokens.create_secret_key(args.signature_algorithm)
    if args.base64:
        key = base64.b64encode(key)
    if args.output:
        _write_private(args.output, key)
    else:
        sys.stdout.buffer.write(key)
        sys.stdout.buffer.flush()
    return 0


def _create_key_pair(args) -> int:
    private, public = tokens.create_key_pair(args.signature_algorithm)
    _write_private(args.output_private_key, private)
    Path(args.output_public_key).write_bytes(public)
    return 0


def _one_key(secret: str | None, other: str | None, other_flag: str) -> None:
    if (secret is None) == (other is None):
        raise ValueError(f"pass exactly one of --secret-key and {other_flag}")


def _create(args) -> int:
    _one_key(args.secret_key, args.private_key, "--private-key")
    if args.secret_key is not None:
        key = tokens.read_secret_key(args.secret_key)
    else:
        key = tokens.load_private_key(tokens.read_key_bytes(args.private_key))
    expires_at = None if args.expiry_time is None else time.time() + args.expiry_time
    print(tokens.create_token(key, args.subject, expires_at, args.signature_algorithm, dict(args.headers) or None),
          flush=True)
    return 0


def _read_token(args) -> str:
    if args.token:
        return args.token.strip()
    if args.stdin:
        return sys.stdin.readline().strip()
    if args.token_file:
        return Path(args.token_file).read_text().strip()
    if os.environ.get("TOKEN"):
        return os.environ["TOKEN"].strip()
    raise ValueError("pass the token as an argument, with --stdin, --token-file, or in the TOKEN environment variable")


def _show(args) -> int:
    header, claims = tokens.unverified_parts(_read_token(args))
    print(json.dumps(header))
    print("---")
    print(json.dumps(claims), flush=True)
    return 0


def _validate(args) -> int:
    _one_key(args.secret_key, args.public_key, "--public-key")
    token = _read_token(args)
    if args.secret_key is not None:
        key = tokens.read_secret_key(args.secret_key)
    else:
        key = tokens.load_public_key(tokens.read_key_bytes(args.public_key))
    verified = tokens.verify_token(token, key)
    print(json.dumps(verified.claims), flush=True)
    return 0


_COMMANDS = {"create-secret-key": _create_secret_key, "create-key-pair": _create_key_pair, "create": _create,
             "show": _show, "validate": _validate}
