#!/usr/bin/env python3
"""What docker-compose.yml exposes, checked offline (tests/deploy/check_compose.sh, step 5).

The compose file is a demo with public passwords (issue 27, point 12), so:

 1. every published port is bound to the loopback (127.0.0.1:PORT:PORT or [::1]):
    "9187:9187" would publish it on every interface of the host;
 2. no service's environment holds a secret (`docker inspect` and /proc/<pid>/environ
    show it): no password= in a conninfo, no user:password@ in a URL, no variable named
    like a password, secret or token unless it is a *_FILE path;
 3. each /run/secrets/NAME a service points at is a secret the service lists, each
    secret a service lists is defined, and each defined secret's file exists;
 4. the file says it is a demo (DEMO ONLY) and why its ports are on 127.0.0.1.

Then deliberately broken copies (a port on every interface, a password in the
environment, a secret the service does not list) must each fail, so the checks cannot
pass vacuously.

  python3 compose_exposure.py SOURCE_DIR
"""
import os
import re
import sys

import yaml

SECRET_NAME = re.compile(r"(PASSWORD|PASSWD|_PASS$|SECRET|TOKEN|CREDENTIAL)", re.I)
INLINE_SECRET = [
    (re.compile(r"(^|\s)password\s*=", re.I), "a password= in a conninfo"),
    (re.compile(r"://[^/@\s:]+:[^/@\s]+@"), "a user:password@ in a URL"),
]
LOOPBACK = ("127.0.0.1:", "[::1]:", "localhost:")


def environment(service):
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def check_ports(name, service, fail):
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            if port.get("host_ip") not in ("127.0.0.1", "::1"):
                fail(f"service {name}: port {port.get('published')} is published on every "
                     "interface; set host_ip: 127.0.0.1")
        elif not str(port).startswith(LOOPBACK):
            fail(f"service {name}: port \"{port}\" is published on every interface; write "
                 f"\"127.0.0.1:{port}\"")


def check_environment(name, service, defined, fail):
    listed = [s if isinstance(s, str) else s.get("source") for s in service.get("secrets") or []]
    for s in listed:
        if s not in defined:
            fail(f"service {name}: secret {s} is not defined under the top-level secrets:")
    for key, value in environment(service).items():
        if SECRET_NAME.search(key) and not key.endswith("_FILE"):
            fail(f"service {name}: {key} puts a secret in the environment; use {key}_FILE "
                 "and a compose secret")
        for pattern, what in INLINE_SECRET:
            if pattern.search(value):
                fail(f"service {name}: {key} holds {what}; give it as a secret file")
        for secret in re.findall(r"/run/secrets/([A-Za-z0-9_.-]+)", value):
            if secret not in listed:
                fail(f"service {name}: {key} reads /run/secrets/{secret}, a secret the "
                     "service does not list under secrets:")


def problems_of(text, src):
    found = []
    compose = yaml.safe_load(text)
    defined = compose.get("secrets") or {}
    for secret, spec in defined.items():
        path = (spec or {}).get("file")
        if path is not None and not os.path.isfile(os.path.join(src, path)):
            found.append(f"secret {secret}: file {path} does not exist")
    for name, service in (compose.get("services") or {}).items():
        check_ports(name, service, found.append)
        check_environment(name, service, defined, found.append)
    if "DEMO ONLY" not in text or "127.0.0.1" not in text.split("services:")[0]:
        found.append("the header must say DEMO ONLY and why the ports are on 127.0.0.1")
    return found


BROKEN = [
    ("a port on every interface", '"127.0.0.1:9187:9187"', '"9187:9187"',
     r'port "9187:9187" is published on every interface'),
    ("a password in a conninfo",
     "OUTBOXD_PG: host=postgres dbname=app user=postgres\n",
     "OUTBOXD_PG: host=postgres dbname=app user=postgres password=outboxd\n",
     r"OUTBOXD_PG holds a password= in a conninfo"),
    ("a password variable", "POSTGRES_PASSWORD_FILE: /run/secrets/postgres_password",
     "POSTGRES_PASSWORD: outboxd", r"POSTGRES_PASSWORD puts a secret in the environment"),
    ("a URL with its password", "OUTBOXD_AMQP_URL_FILE: /run/secrets/amqp_url",
     "OUTBOXD_AMQP_URL: amqp://outboxd:outboxd@rabbitmq:5672/%2f",
     r"OUTBOXD_AMQP_URL holds a user:password@ in a URL"),
    ("a secret the service does not list", "secrets: [postgres_password, amqp_url]",
     "secrets: [postgres_password]", r"reads /run/secrets/amqp_url, a secret the service"),
    ("the NATS port on every interface", '"127.0.0.1:4222:4222"', '"4222:4222"',
     r'service nats: port "4222:4222" is published on every interface'),
    ("a NATS URL with its password", "OUTBOXD_NATS_URL_FILE: /run/secrets/nats_url",
     "OUTBOXD_NATS_URL: nats://outboxd:outboxd@nats:4222",
     r"OUTBOXD_NATS_URL holds a user:password@ in a URL"),
    ("the NATS relay without its secret", "secrets: [postgres_password, nats_url]",
     "secrets: [postgres_password]", r"reads /run/secrets/nats_url, a secret the service"),
]


def main():
    src = sys.argv[1]
    text = open(os.path.join(src, "docker-compose.yml"), encoding="utf-8").read()
    problems = problems_of(text, src)
    if not problems:
        for what, old, new, expect in BROKEN:
            if old not in text:
                problems.append(f"broken copy \"{what}\": docker-compose.yml no longer holds "
                                f"{old!r}; update BROKEN")
                continue
            found = problems_of(text.replace(old, new, 1), src)
            if not any(re.search(expect, p) for p in found):
                problems.append(f"broken copy \"{what}\" was not caught: {found or 'nothing found'}")
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"check_compose: ports on the loopback, no secret in an environment, every secret "
          f"file listed and present ({len(BROKEN)} broken copies caught)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
