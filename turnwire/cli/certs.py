"""``turnwire certs``: make a deployment's CA and mutual-TLS certificates (turnwire.certs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from turnwire.certs import (
    CA_CERT,
    CA_KEY,
    DEFAULT_DAYS,
    MAX_DAYS,
    CertsError,
    IssuedCerts,
    issue_deployment,
)
from turnwire.cli.exit_codes import ExitCode

SUMMARY = "make a local CA and mutual-TLS certificates for a coordinator and its runners"
_DESCRIPTION = f"""\
{SUMMARY}.

In --dir (created with mode 0700 if missing) it writes the deployment's CA,
{CA_CERT} + {CA_KEY}, and for every --coordinator and --runner NAME a
certificate NAME.pem signed by that CA and its private key NAME.key. Keys are
EC P-256, unencrypted, mode 0600 (never readable by others, not even while
being written); certificates are mode 0644.

If {CA_CERT} and {CA_KEY} already exist the CA is reused, never replaced, so a
runner added later is trusted by the services already running. An existing
NAME.pem or NAME.key is not overwritten unless --force is given.

Each certificate has CN=NAME, the SANs localhost, 127.0.0.1, ::1, every --host,
and urn:turnwire:coordinator:NAME or urn:turnwire:runner:NAME; it is valid for
TLS server and client use. Without --coordinator and --runner it makes
"coordinator" and "runner-1"; given either, it makes only the names given.
"""
EXAMPLES = """examples:
  turnwire certs --dir ./tls                                # coordinator + runner-1
  turnwire certs --dir ./tls --runner runner-1 --runner runner-2 --coordinator coordinator \\
      --host coord.internal --host 10.0.0.5
  turnwire certs --dir ./tls --runner runner-3              # later: same CA, one more runner
  turnwire certs --dir ./tls --runner runner-1 --force      # replace runner-1's certificate"""
EPILOG = """exit status: 0 written, 1 a file could not be read or written, 2 bad arguments or a file
that would be overwritten (then nothing is written)"""


def configure(parser: argparse.ArgumentParser) -> None:
    """The options of `turnwire certs` (the turnwire CLI extension hook)."""
    # SUMMARY is the one line of `turnwire --help`; this command's own --help says more.
    parser.description = _DESCRIPTION
    parser.add_argument(
        "--dir", type=Path, required=True, help="where the CA, certificates and keys go"
    )
    parser.add_argument(
        "--coordinator",
        action="append",
        metavar="NAME",
        help="a coordinator certificate to make (repeatable)",
    )
    parser.add_argument(
        "--runner",
        action="append",
        metavar="NAME",
        help="a runner certificate to make (repeatable)",
    )
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="HOST",
        help="an extra DNS name or IP address in every certificate (repeatable)",
    )
    parser.add_argument(
        "--days",
        type=int,
        default=DEFAULT_DAYS,
        help=f"validity in days, 1..{MAX_DAYS} (default {DEFAULT_DAYS})",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace existing NAME.pem/NAME.key (never the CA)"
    )


def run(args: argparse.Namespace) -> int:
    coordinators, runners = args.coordinator, args.runner
    if coordinators is None and runners is None:
        coordinators, runners = ["coordinator"], ["runner-1"]
    try:
        issued = issue_deployment(
            args.dir,
            coordinators=coordinators or [],
            runners=runners or [],
            hosts=args.host,
            days=args.days,
            overwrite=args.force,
        )
    except CertsError as error:
        print(f"turnwire certs: {error}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except OSError as error:
        print(f"turnwire certs: {error}", file=sys.stderr)
        return int(ExitCode.UNEXPECTED)
    print(_report(issued, coordinators or [], runners or []))
    return int(ExitCode.OK)


def _report(issued: IssuedCerts, coordinators: list[str], runners: list[str]) -> str:
    lines = []
    if issued.ca_reused:
        lines.append(f"reused the existing CA {' and '.join(map(str, issued.reused))}")
    for file in issued.written:
        role = "CA" if file.role == "ca" else file.role
        if file.private:
            lines.append(f"wrote {file.path} ({role} private key, mode 0600)")
        else:
            until = f"{file.not_after:%Y-%m-%d}"
            lines.append(f"wrote {file.path} ({role}, CN {file.common_name}, valid until {until})")
    ca = issued.directory / CA_CERT
    hints = [
        f"python -m {service} serve --tls-cert {issued.cert_of(name)} "
        f"--tls-key {issued.key_of(name)} --tls-ca {ca} ..."
        for service, names in (("runner_svc", runners), ("coordinator_svc", coordinators))
        for name in names
    ]
    lines += [("next: " if i == 0 else "      ") + hint for i, hint in enumerate(hints)]
    return "\n".join(lines)
