"""Issue 26: a reload reports everything it changes. Every key
`ratelimitd --config-keys` lists is changed alone, one SIGHUP each, in one
daemon: the reload must log it, either applied ("reload: KEY OLD -> NEW")
or as a pending restart ("reload: KEY differs: running X, file Y; restart
..."), as the key tables say (`ratelimitd --reload-keys`). A key added to the
tables without an entry in CHANGES below fails the test: no key can be
silent on reload again."""

import os
import re
import time
import unittest

from harness import DaemonTest, Resp, RespError, free_port, run_cli

SRCDIR = os.environ.get("RL_SRCDIR", os.path.join(os.path.dirname(__file__), "..", ".."))

RULES = """\
domain: %s
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
"""

# The base configuration, one raw YAML value per top-level key; %(name)s are
# filled in by the test (ports, paths). Each listen entry has a part to play:
# 0 a TCP admin listener (PING and the harness), 1 an HTTP one (its
# options), 2 a unix socket (its mode).
BASE = {
    "listen": ['{address: "127.0.0.1:%(port)d", admin: true}',
               '{address: "127.0.0.1:%(hport)d", protocol: http}',
               '{address: "unix:%(tmp)s/rl.sock"}'],
    "redis": '{address: "%(redis)s", timeout: 2s}',
    "stores": '{s: {address: "%(redis)s", timeout: 2s}}',
    "throttle": "{enabled: true}",
    "envoy": "{config: r1.yaml}",
    "decision_log": "{path: %(tmp)s/d.log}",
    "tracing": '{endpoint: "http://127.0.0.1:%(xport)d/v1/traces"}',
    "policies": {
        "p": "5/60s",
        "f": "{algorithm: funnel, capacity: 5, rate: 1/1s}",
        "c": "{algorithm: concurrency, limit: 3, lease: 30s}",
        "b": "{limits: 5/60s, ban: {after: 3, within: 1m, for: 1h}}",
        "o": "{limits: 5/60s, overrides: {alice: 10/60s}}",
        "fo": "{algorithm: funnel, capacity: 5, rate: 1/1s, "
              "overrides: {alice: {capacity: 9, rate: 2/1s}}}",
    },
}


def store(value):
    """BASE's stores with store s given `value`."""
    return {"stores": "{s: %s}" % value}


def listen_with(i, entry):
    """BASE's listen with entry i replaced."""
    entries = list(BASE["listen"])
    entries[i] = entry
    return entries


def policy(name, value):
    """BASE's policies with policy `name` given `value`."""
    return {"policies": dict(BASE["policies"], **{name: value})}


# key -> (what changes in BASE: top-level key -> raw YAML value, None to
# remove it; the keys the reload must report, exactly). A policy is
# reported as "policy NAME". Some keys cannot change alone: a Redis reached
# through sentinels has no address, a username needs a password.
CHANGES = {
    "listen": ({"listen": BASE["listen"] + ['"127.0.0.1:%(xport)d"']}, {"listen"}),
    "store": ({"store": "memory", "redis": None},
              {"store", "redis.address", "redis.timeout"}),
    "memory": ({"memory": "{max_keys: 5000}", "on_store_error": "local"},
               {"memory.max_keys", "on_store_error"}),
    "redis": ({"redis": '{address: "%(redis)s", timeout: 3s}'}, {"redis.timeout"}),
    "prefix": ({"prefix": '"x:"'}, {"prefix"}),
    "on_store_error": ({"on_store_error": "deny"}, {"on_store_error"}),
    "local_share": ({"local_share": "0.5", "on_store_error": "local"},
                    {"local_share", "on_store_error"}),
    "max_line": ({"max_line": "8192"}, {"max_line"}),
    "max_clients": ({"max_clients": "50"}, {"max_clients"}),
    "max_delayed": ({"max_delayed": "50"}, {"max_delayed"}),
    "idle_timeout": ({"idle_timeout": "1h"}, {"idle_timeout"}),
    "request_timeout": ({"request_timeout": "20s"}, {"request_timeout"}),
    "log_level": ({"log_level": "debug"}, {"log_level"}),
    "metrics": ({"metrics": '{listen: "127.0.0.1:%(mport)d"}'}, {"metrics.listen"}),
    "throttle": ({"throttle": None}, {"throttle.enabled"}),
    "shadow": ({"shadow": "true"}, {"shadow"}),
    "watch": ({"watch": "true"}, {"watch"}),
    "envoy": ({"envoy": None}, {"envoy.config"}),
    "decision_log": ({"decision_log": None}, {"decision_log.path"}),
    "tracing": ({"tracing": None}, {"tracing.endpoint"}),
    "policies": (policy("q", "1/1s"), {"policy q"}),
    "listen[].address": ({"listen": listen_with(1, '{address: "127.0.0.1:%(xport)d", '
                                                   'protocol: http}')},
                         {"listen[1].address"}),
    "listen[].name": ({"listen": listen_with(0, '{address: "127.0.0.1:%(port)d", admin: true, '
                                                'name: main}')},
                      {"listen[0].name"}),
    "listen[].admin": ({"listen": listen_with(0, '{address: "127.0.0.1:%(port)d"}')},
                       {"listen[0].admin"}),
    "listen[].mode": ({"listen": listen_with(2, '{address: "unix:%(tmp)s/rl.sock", mode: 0600}')},
                      {"listen[2].mode"}),
    "listen[].protocol": ({"listen": listen_with(2, '{address: "unix:%(tmp)s/rl.sock", '
                                                    'protocol: http}')},
                          {"listen[2].protocol"}),
    "listen[].user_header": ({"listen": listen_with(1, '{address: "127.0.0.1:%(hport)d", '
                                                       'protocol: http, user_header: X-User}')},
                             {"listen[1].user_header"}),
    "listen[].trusted_proxies": ({"listen": listen_with(
        1, '{address: "127.0.0.1:%(hport)d", protocol: http, trusted_proxies: [10.0.0.0/8]}')},
        {"listen[1].trusted_proxies"}),
    "listen[].deny_status": ({"listen": listen_with(1, '{address: "127.0.0.1:%(hport)d", '
                                                       'protocol: http, deny_status: 403}')},
                             {"listen[1].deny_status"}),
    "listen[].legacy_headers": ({"listen": listen_with(1, '{address: "127.0.0.1:%(hport)d", '
                                                          'protocol: http, legacy_headers: true}')},
                                {"listen[1].legacy_headers"}),
    "listen[].tls": ({"listen": listen_with(0, '{address: "127.0.0.1:%(port)d", admin: true, tls: {enabled: false, cert_file: %(tmp)s/c.pem, key_file: %(tmp)s/k.pem}}')},
          {"listen[0].tls.cert_file", "listen[0].tls.key_file"}),
    "listen[].tls.enabled": ({"listen": listen_with(0, '{address: "127.0.0.1:%(port)d", admin: true, tls: {cert_file: %(tmp)s/c.pem, key_file: %(tmp)s/k.pem}}')},
                             {"listen[0].tls.enabled", "listen[0].tls.cert_file",
                              "listen[0].tls.key_file"}),
    "listen[].tls.cert_file": ({"listen": listen_with(0, '{address: "127.0.0.1:%(port)d", admin: true, tls: {enabled: false, cert_file: %(tmp)s/c.pem, key_file: %(tmp)s/k.pem}}')},
          {"listen[0].tls.cert_file", "listen[0].tls.key_file"}),
    "listen[].tls.key_file": ({"listen": listen_with(0, '{address: "127.0.0.1:%(port)d", admin: true, tls: {enabled: false, cert_file: %(tmp)s/c.pem, key_file: %(tmp)s/k.pem}}')},
          {"listen[0].tls.cert_file", "listen[0].tls.key_file"}),
    "listen[].tls.ca_file": ({"listen": listen_with(0, '{address: "127.0.0.1:%(port)d", admin: true, tls: {enabled: false, cert_file: %(tmp)s/c.pem, key_file: %(tmp)s/k.pem, client_certs: optional, ca_file: %(tmp)s/ca.pem}}')},
          {"listen[0].tls.cert_file", "listen[0].tls.key_file", "listen[0].tls.client_certs", "listen[0].tls.ca_file"}),
    "listen[].tls.ca_dir": ({"listen": listen_with(0, '{address: "127.0.0.1:%(port)d", admin: true, tls: {enabled: false, cert_file: %(tmp)s/c.pem, key_file: %(tmp)s/k.pem, client_certs: required, ca_dir: %(tmp)s}}')},
          {"listen[0].tls.cert_file", "listen[0].tls.key_file", "listen[0].tls.client_certs", "listen[0].tls.ca_dir"}),
    "listen[].tls.client_certs": ({"listen": listen_with(0, '{address: "127.0.0.1:%(port)d", admin: true, tls: {enabled: false, cert_file: %(tmp)s/c.pem, key_file: %(tmp)s/k.pem, client_certs: optional, ca_file: %(tmp)s/ca.pem}}')},
          {"listen[0].tls.cert_file", "listen[0].tls.key_file", "listen[0].tls.client_certs", "listen[0].tls.ca_file"}),
    "listen[].auth": ({"listen": listen_with(0, '{address: "127.0.0.1:%(port)d", admin: true, '
                                                'auth: required}'),
                       "identities": '{app: {token_env: RL_TEST_TOKEN, rights: [decide]}}'},
                      {"listen[0].auth", "identities"}),
    "identities": ({"identities": '{app: {token_env: RL_TEST_TOKEN, rights: [decide]}}'},
                   {"identities"}),
    "identities.NAME.token_env": ({"identities": '{app: {token_env: RL_TEST_TOKEN, '
                                                 'rights: [decide]}}'}, {"identities"}),
    "identities.NAME.token_file": ({"identities": '{app: {token_file: %(tmp)s/t.token, '
                                                  'rights: [decide]}}'}, {"identities"}),
    "identities.NAME.cert_name": ({"identities": '{app: {cert_name: app.internal, '
                                                 'rights: [decide]}}'}, {"identities"}),
    "identities.NAME.rights": ({"identities": '{app: {cert_name: app.internal, '
                                              'rights: [decide, admin]}}'}, {"identities"}),
    "identities.NAME.policies": ({"identities": '{app: {cert_name: app.internal, '
                                                'rights: [decide], policies: [p]}}'},
                                 {"identities"}),
    "memory.max_keys": ({"memory": "{max_keys: 5000}", "on_store_error": "local"},
                        {"memory.max_keys", "on_store_error"}),
    "redis.address": ({"redis": '{address: "127.0.0.1:%(xport)d", timeout: 2s}'},
                      {"redis.address"}),
    "redis.cluster": ({"redis": '{cluster: ["127.0.0.1:%(xport)d"], timeout: 2s}'},
                      {"redis.address", "redis.cluster"}),
    "redis.sentinel": ({"redis": '{sentinel: {master: m, addresses: ["127.0.0.1:%(xport)d"]}, '
                                 'timeout: 2s}'},
                       {"redis.address", "redis.sentinel.master", "redis.sentinel.addresses"}),
    "redis.username": ({"redis": '{address: "%(redis)s", timeout: 2s, username: u, '
                                 'password: %(secret)s}'},
                       {"redis.username", "redis.password"}),
    "redis.password": ({"redis": '{address: "%(redis)s", timeout: 2s, password: %(secret)s}'},
                       {"redis.password"}),
    "redis.database": ({"redis": '{address: "%(redis)s", timeout: 2s, database: 3}'},
                       {"redis.database"}),
    "redis.timeout": ({"redis": '{address: "%(redis)s", timeout: 250ms}'}, {"redis.timeout"}),
    "redis.connections": ({"redis": '{address: "%(redis)s", timeout: 2s, connections: 3}'},
                          {"redis.connections"}),
    "redis.wait_replicas": ({"redis": '{address: "%(redis)s", timeout: 2s, wait_replicas: 1}'},
                            {"redis.wait_replicas"}),
    "redis.wait_timeout": ({"redis": '{address: "%(redis)s", timeout: 2s, wait_timeout: 1s}'},
                           {"redis.wait_timeout"}),
    "redis.tls": ({"redis": '{address: "%(redis)s", timeout: 2s, '
                            'tls: {enabled: false, server_name: redis.example}}'},
                  {"redis.tls.server_name"}),
    "redis.tls.enabled": ({"redis": '{address: "%(redis)s", timeout: 2s, '
                                    'tls: {ca_file: %(tmp)s/ca.pem}}'},
                          {"redis.tls.enabled", "redis.tls.ca_file"}),
    "redis.tls.ca_file": ({"redis": '{address: "%(redis)s", timeout: 2s, '
                                    'tls: {enabled: false, ca_file: %(tmp)s/ca.pem}}'},
                          {"redis.tls.ca_file"}),
    "redis.tls.ca_dir": ({"redis": '{address: "%(redis)s", timeout: 2s, '
                                   'tls: {enabled: false, ca_dir: %(tmp)s}}'},
                         {"redis.tls.ca_dir"}),
    "redis.tls.cert_file": ({"redis": '{address: "%(redis)s", timeout: 2s, '
                                      'tls: {enabled: false, cert_file: %(tmp)s/c.pem, '
                                      'key_file: %(tmp)s/k.pem}}'},
                            {"redis.tls.cert_file", "redis.tls.key_file"}),
    "redis.tls.key_file": ({"redis": '{address: "%(redis)s", timeout: 2s, '
                                     'tls: {enabled: false, cert_file: %(tmp)s/c.pem, '
                                     'key_file: %(tmp)s/k.pem}}'},
                           {"redis.tls.cert_file", "redis.tls.key_file"}),
    "redis.tls.server_name": ({"redis": '{address: "%(redis)s", timeout: 2s, '
                                        'tls: {enabled: false, server_name: redis.example}}'},
                              {"redis.tls.server_name"}),
    "redis.sentinel.master": ({"redis": '{sentinel: {master: other, addresses: '
                                        '["127.0.0.1:%(xport)d"]}, timeout: 2s}'},
                              {"redis.address", "redis.sentinel.master",
                               "redis.sentinel.addresses"}),
    "redis.sentinel.addresses": ({"redis": '{sentinel: {master: m, addresses: '
                                           '["127.0.0.1:%(xport)d", "127.0.0.2:%(xport)d"]}, '
                                           'timeout: 2s}'},
                                 {"redis.address", "redis.sentinel.master",
                                  "redis.sentinel.addresses"}),
    "metrics.listen": ({"metrics": '{listen: "127.0.0.1:%(mport)d"}'}, {"metrics.listen"}),
    "metrics.top_series": ({"metrics": '{listen: "127.0.0.1:%(mport)d", top_series: 3}'},
                           {"metrics.listen", "metrics.top_series"}),
    "metrics.console": ({"metrics": '{listen: "127.0.0.1:%(mport)d", console: false}'},
                        {"metrics.listen", "metrics.console"}),
    "metrics.max_clients": ({"metrics": '{listen: "127.0.0.1:%(mport)d", max_clients: 5}'},
                            {"metrics.listen", "metrics.max_clients"}),
    "metrics.tls": ({"metrics": '{listen: "127.0.0.1:%(mport)d", tls: {enabled: false, cert_file: %(tmp)s/c.pem, key_file: %(tmp)s/k.pem}}'},
          {"metrics.listen", "metrics.tls.cert_file", "metrics.tls.key_file"}),
    "metrics.tls.enabled": ({"metrics": '{listen: "127.0.0.1:%(mport)d", tls: {cert_file: %(tmp)s/c.pem, key_file: %(tmp)s/k.pem}}'},
          {"metrics.listen", "metrics.tls.enabled", "metrics.tls.cert_file", "metrics.tls.key_file"}),
    "metrics.tls.cert_file": ({"metrics": '{listen: "127.0.0.1:%(mport)d", tls: {enabled: false, cert_file: %(tmp)s/c.pem, key_file: %(tmp)s/k.pem}}'},
          {"metrics.listen", "metrics.tls.cert_file", "metrics.tls.key_file"}),
    "metrics.tls.key_file": ({"metrics": '{listen: "127.0.0.1:%(mport)d", tls: {enabled: false, cert_file: %(tmp)s/c.pem, key_file: %(tmp)s/k.pem}}'},
          {"metrics.listen", "metrics.tls.cert_file", "metrics.tls.key_file"}),
    "metrics.tls.ca_file": ({"metrics": '{listen: "127.0.0.1:%(mport)d", tls: {enabled: false, cert_file: %(tmp)s/c.pem, key_file: %(tmp)s/k.pem, client_certs: optional, ca_file: %(tmp)s/ca.pem}}'},
          {"metrics.listen", "metrics.tls.cert_file", "metrics.tls.key_file", "metrics.tls.client_certs", "metrics.tls.ca_file"}),
    "metrics.tls.ca_dir": ({"metrics": '{listen: "127.0.0.1:%(mport)d", tls: {enabled: false, cert_file: %(tmp)s/c.pem, key_file: %(tmp)s/k.pem, client_certs: required, ca_dir: %(tmp)s}}'},
          {"metrics.listen", "metrics.tls.cert_file", "metrics.tls.key_file", "metrics.tls.client_certs", "metrics.tls.ca_dir"}),
    "metrics.tls.client_certs": ({"metrics": '{listen: "127.0.0.1:%(mport)d", tls: {enabled: false, cert_file: %(tmp)s/c.pem, key_file: %(tmp)s/k.pem, client_certs: optional, ca_file: %(tmp)s/ca.pem}}'},
          {"metrics.listen", "metrics.tls.cert_file", "metrics.tls.key_file", "metrics.tls.client_certs", "metrics.tls.ca_file"}),
    "throttle.enabled": ({"throttle": "{enabled: false}"}, {"throttle.enabled"}),
    "throttle.namespace": ({"throttle": "{enabled: true, namespace: t}"},
                           {"throttle.namespace"}),
    "throttle.max_burst": ({"throttle": "{enabled: true, max_burst: 7}"},
                           {"throttle.max_burst"}),
    "throttle.max_period": ({"throttle": "{enabled: true, max_period: 1h}"},
                            {"throttle.max_period"}),
    "envoy.config": ({"envoy": "{config: r2.yaml}"}, {"envoy.config"}),
    "decision_log.path": ({"decision_log": "{path: %(tmp)s/e.log}"}, {"decision_log.path"}),
    "decision_log.sample": ({"decision_log": "{path: %(tmp)s/d.log, sample: 0.5}"},
                            {"decision_log.sample"}),
    "decision_log.max_size": ({"decision_log": "{path: %(tmp)s/d.log, max_size: 8192}"},
                              {"decision_log.max_size"}),
    "decision_log.keep": ({"decision_log": "{path: %(tmp)s/d.log, keep: 1}"},
                          {"decision_log.keep"}),
    "tracing.endpoint": ({"tracing": '{endpoint: "http://127.0.0.2:%(xport)d/t"}'},
                         {"tracing.endpoint"}),
    "tracing.sample": ({"tracing": '{endpoint: "http://127.0.0.1:%(xport)d/v1/traces", '
                                  'sample: 0.5}'}, {"tracing.sample"}),
    "tracing.max_queue": ({"tracing": '{endpoint: "http://127.0.0.1:%(xport)d/v1/traces", '
                                     'max_queue: 64}'}, {"tracing.max_queue"}),
    "decision_log.hash_key_file": ({"decision_log": "{path: %(tmp)s/d.log, hash_key_file: "
                                                    "%(tmp)s/t.token}"},
                                   {"decision_log.hash_key_file"}),
    "envoy.algorithm": ({"envoy": "{config: r1.yaml, algorithm: sliding_window}"},
                        {"envoy.algorithm"}),
    "envoy.response_headers": ({"envoy": "{config: r1.yaml, response_headers: ratelimit}"},
                               {"envoy.response_headers"}),
    "envoy.store": ({"envoy": "{config: r1.yaml, store: s}"}, {"envoy.store"}),
    "policies.NAME.algorithm": (policy("p", "{algorithm: fixed_window, limits: 5/60s}"),
                                {"policy p"}),
    "policies.NAME.limits": (policy("p", "{limits: [5/60s, 50/1h]}"), {"policy p"}),
    "policies.NAME.capacity": (policy("f", "{algorithm: funnel, capacity: 6, rate: 1/1s}"),
                               {"policy f"}),
    "policies.NAME.rate": (policy("f", "{algorithm: funnel, capacity: 5, rate: 2/1s}"),
                           {"policy f"}),
    "policies.NAME.delay": (policy("f", "{algorithm: funnel, capacity: 5, rate: 1/1s, "
                                        "delay: {max: 500ms}}"), {"policy f"}),
    "policies.NAME.delay.max": (policy("f", "{algorithm: funnel, capacity: 5, rate: 1/1s, "
                                            "delay: {max: 1s}}"), {"policy f"}),
    "policies.NAME.blocks": (policy("w", "{algorithm: fixed_window, limits: 5/60s, "
                                         "blocks: {max: 10}}"), {"policy w"}),
    "policies.NAME.blocks.max": (policy("f", "{algorithm: funnel, capacity: 5, rate: 1/1s, "
                                             "blocks: {max: 20, ttl: 50ms}}"), {"policy f"}),
    "policies.NAME.blocks.ttl": (policy("f", "{algorithm: funnel, capacity: 5, rate: 1/1s, "
                                             "blocks: {max: 10, ttl: 80ms}}"), {"policy f"}),
    "policies.NAME.limit": (policy("c", "{algorithm: concurrency, limit: 4, lease: 30s}"),
                            {"policy c"}),
    "policies.NAME.lease": (policy("c", "{algorithm: concurrency, limit: 3, lease: 1m}"),
                            {"policy c"}),
    "policies.NAME.on_store_error": (policy("p", "{limits: 5/60s, on_store_error: deny}"),
                                     {"policy p"}),
    "policies.NAME.shadow": (policy("p", "{limits: 5/60s, shadow: true}"), {"policy p"}),
    "policies.NAME.timezone": (policy("m", "{algorithm: fixed_window, limits: 9/month, "
                                           "timezone: Asia/Tokyo}"), {"policy m"}),
    "policies.NAME.hold": (policy("p", "{limits: 5/60s, hold: 10m}"), {"policy p"}),
    "policies.NAME.ban": (policy("p", "{limits: 5/60s, ban: {after: 2, within: 1m, for: 1h}}"),
                          {"policy p"}),
    "policies.NAME.overrides": (policy("p", "{limits: 5/60s, overrides: {bob: unlimited}}"),
                                {"policy p"}),
    "policies.NAME.ban.after": (policy("b", "{limits: 5/60s, ban: {after: 4, within: 1m, "
                                            "for: 1h}}"), {"policy b"}),
    "policies.NAME.ban.within": (policy("b", "{limits: 5/60s, ban: {after: 3, within: 2m, "
                                             "for: 1h}}"), {"policy b"}),
    "policies.NAME.ban.for": (policy("b", "{limits: 5/60s, ban: {after: 3, within: 1m, "
                                          "for: 2h}}"), {"policy b"}),
    "policies.NAME.overrides.USER.limits": (policy("o", "{limits: 5/60s, "
                                                        "overrides: {alice: 11/60s}}"),
                                            {"policy o"}),
    "policies.NAME.overrides.USER.capacity": (policy(
        "fo", "{algorithm: funnel, capacity: 5, rate: 1/1s, "
              "overrides: {alice: {capacity: 8, rate: 2/1s}}}"), {"policy fo"}),
    "policies.NAME.overrides.USER.rate": (policy(
        "fo", "{algorithm: funnel, capacity: 5, rate: 1/1s, "
              "overrides: {alice: {capacity: 9, rate: 3/1s}}}"), {"policy fo"}),
    "policies.NAME.overrides.USER.timezone": (policy(
        "mo", "{algorithm: fixed_window, limits: 9/month, "
              "overrides: {alice: {limits: 9/month@15, timezone: Asia/Tokyo}}}"),
        {"policy mo"}),
}

# a store of stores: takes redis:'s keys, reported as stores.s.KEY
for _key in [k for k in CHANGES if k.startswith("redis.")]:
    _changes, _want = CHANGES[_key]
    CHANGES["stores.NAME." + _key[len("redis."):]] = (
        store(_changes["redis"]), {"stores.s." + w[len("redis."):] for w in _want})
CHANGES["stores"] = ({"stores": '{s: {address: "%(redis)s", timeout: 2s}, '
                                't: {address: "%(redis)s"}}'}, {"stores"})
CHANGES["policies.NAME.store"] = (policy("p", "{limits: 5/60s, store: s}"), {"policy p"})
# a remote store's policies take blocks: {max: auto} (the funnels here):
# the policies it shapes are reported changed too
SHAPES_POLICIES = {"redis.remote"}
CHANGES["redis.remote"] = ({"redis": '{address: "%(redis)s", timeout: 2s, remote: true}'},
                           {"redis.remote", "policy f", "policy fo"})
CHANGES["stores.NAME.remote"] = (store('{address: "%(redis)s", timeout: 2s, remote: true}'),
                                 {"stores.s.remote"})

APPLIED = re.compile(r"^info: reload: (\S+) (?:\S.* )?-> ")
APPLIED_SECRET = re.compile(r"^info: reload: (\S+) changed \(not shown\)$")
PENDING = re.compile(r"^warn: reload: (\S+) differs(?:: running .*, file .*| from the running "
                     r"one \(not shown\)); restart ratelimitd to apply it$")
POLICY = re.compile(r"^info: reload: policy (\S+) (added|changed|removed)\b")
LOADED = re.compile(r"^info: reload: configuration .* loaded")


def emit(doc):
    """YAML text for doc: top-level key -> raw value, a list or a mapping
    of raw values."""
    out = []
    for k, v in doc.items():
        if isinstance(v, list):
            out.append("%s:" % k)
            out += ["  - %s" % x for x in v]
        elif isinstance(v, dict):
            out.append("%s:" % k)
            out += ["  %s: %s" % kv for kv in v.items()]
        else:
            out.append("%s: %s" % (k, v))
    return "\n".join(out) + "\n"


def table_name(reported):
    """The key tables' name of a reported key: listen[2].mode is listen[].mode."""
    return re.sub(r"^stores\.s\.", "stores.NAME.",
                  re.sub(r"^listen\[\d+\]", "listen[]", reported))


class ReloadKeysTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        os.environ["RL_TEST_TOKEN"] = "reload-keys-token-0123456789"
        with open(os.path.join(self.tmpdir, "t.token"), "w") as f:
            f.write("reload-keys-file-token-0123456789\n")
        for name in ("r1", "r2"):
            with open(os.path.join(self.tmpdir, name + ".yaml"), "w") as f:
                f.write(RULES % name)
        self.vars = {"port": free_port(), "hport": free_port(), "xport": free_port(),
                     "mport": free_port(), "tmp": self.tmpdir, "redis": self.redis.address,
                     "secret": "s3cret-%d" % free_port()}

    def text(self, changes):
        doc = dict(BASE)
        for k, v in changes.items():
            if v is None:
                doc.pop(k, None)
            else:
                doc[k] = v
        # policies last, as people write them
        doc["policies"] = doc.pop("policies")
        return emit(doc) % self.vars

    def reload(self, text):
        """Reloads with text; returns the lines that reload logged up to its
        "configuration ... loaded" line (it fails on a file in error)."""
        n = len(self.daemon.log_lines())
        self.daemon.reload(text)
        self.daemon.wait_log(r"^(info: reload: configuration .* loaded|error: reload failed)",
                             start=n)
        lines = self.daemon.log_lines()[n:]
        end = next(i for i, ln in enumerate(lines)
                   if LOADED.search(ln) or ln.startswith("error: reload failed"))
        self.assertTrue(LOADED.search(lines[end]), "the file was refused:\n%s"
                        % "\n".join(lines[:end + 1]))
        return lines[:end]

    @staticmethod
    def reported(lines):
        """{reported key: "applies", "restart" or "per-policy"} of a reload's lines."""
        out = {}
        for ln in lines:
            m = POLICY.search(ln)
            if m:
                out["policy " + m.group(1)] = "per-policy"
                continue
            m = PENDING.search(ln)
            if m:
                out[m.group(1)] = "restart"
                continue
            m = APPLIED.search(ln) or APPLIED_SECRET.search(ln)
            if m:
                out[m.group(1)] = "applies"
        return out

    def test_every_key_is_reported_as_the_tables_say(self):
        r = run_cli(["--config-keys"])
        self.assertEqual(r.returncode, 0, r.stderr)
        keys = r.stdout.split()
        self.assertGreater(len(keys), 50)
        missing = [k for k in keys if k not in CHANGES]
        self.assertEqual(missing, [], "keys of the tables this test cannot change yet: "
                         "give each an entry in CHANGES")
        self.assertEqual(sorted(set(CHANGES) - set(keys)), [], "keys the tables no longer have")
        r = run_cli(["--reload-keys"])
        kinds = {}
        if r.returncode == 0:
            kinds = dict(ln.split() for ln in r.stdout.splitlines())
        self.assertEqual(sorted(kinds), sorted(keys), "--reload-keys lists the same keys")

        base = self.text({})
        self.daemon = self.start_daemon(config=base, port=self.vars["port"])
        problems = []
        for key in keys:
            changes, want = CHANGES[key]
            lines = self.reload(self.text(changes))
            got = self.reported(lines)
            if set(got) != want:
                problems.append("%s: reported %s, want %s; log:\n    %s"
                                % (key, sorted(got) or "nothing", sorted(want),
                                   "\n    ".join(lines)))
            for name, how in got.items():
                table = "policies.NAME" if name.startswith("policy ") else table_name(name)
                if how == "per-policy":
                    ok = kinds.get(key) == "per-policy" or key in SHAPES_POLICIES
                else:
                    ok = kinds.get(table) == how
                if not ok:
                    problems.append("%s: %s reported as %s, the tables say %s"
                                    % (key, name, how, kinds.get(table, kinds.get(key))))
            # back to the base: what was applied is logged back, nothing is pending
            back = self.reload(base)
            pending = [ln for ln in back if ln.startswith("warn: ")]
            if pending or set(self.reported(back)) != {k for k in got if got[k] != "restart"}:
                problems.append("%s: back to the base file, the reload logged:\n    %s"
                                % (key, "\n    ".join(back)))
        self.assertEqual(problems, [], "\n".join(problems))
        self.assertNotIn(self.vars["secret"], self.daemon.log())
        with self.daemon.client() as c:
            self.assertEqual(c.request("PING"), "PONG")

    def test_keys_said_to_apply_do_apply(self):
        """The keys that were silent on reload (log_level, throttle.*,
        local_share) really take effect on reload, as the tables claim."""
        port = free_port()

        def text(**top):
            top.setdefault("on_store_error", "local")
            top.setdefault("local_share", "0.5")
            return emit(dict({"listen": ['{address: "127.0.0.1:%d", admin: true}' % port],
                              "redis": '{address: "%s", timeout: 50ms}' % self.redis.address},
                             **top, policies={"p": "4/60s"}))
        self.daemon = self.start_daemon(config=text(), port=port)
        # log_level: at warn, a reload logs its restart warning but not the
        # info line that ends it; back at info, that line is there again
        n = len(self.daemon.log_lines())
        self.daemon.reload(text(log_level="warn"))
        self.daemon.wait_log(r"^info: reload: log_level info -> warn$", start=n)
        n = len(self.daemon.log_lines())
        self.daemon.reload(text(log_level="warn", redis='{address: "%s", timeout: 50ms, '
                                                        'database: 2}' % self.redis.address))
        self.daemon.wait_log(r"^warn: reload: redis\.database differs", start=n)
        time.sleep(0.2)
        self.assertEqual([ln for ln in self.daemon.log_lines()[n:] if ln.startswith("info: ")],
                         [])
        n = len(self.daemon.log_lines())
        self.daemon.reload(text())
        self.daemon.wait_log(r"^info: reload: configuration .* loaded", start=n)
        # throttle: CL.THROTTLE is refused until a reload turns it on, then
        # bounded by the reloaded max_burst
        with Resp(port=port) as r:
            with self.assertRaisesRegex(RespError, "CL.THROTTLE is off"):
                r.call("CL.THROTTLE", "u", "5", "10", "60")
            n = len(self.daemon.log_lines())
            self.daemon.reload(text(throttle="{enabled: true, max_burst: 3}"))
            self.daemon.wait_log(r"^info: reload: configuration .* loaded", start=n)
            self.assertEqual(r.call("CL.THROTTLE", "u", "3", "10", "60")[0], 0)
            with self.assertRaisesRegex(RespError, "max_burst must be from 0 to 3"):
                r.call("CL.THROTTLE", "u", "5", "10", "60")
        # local_share: with Redis gone, each daemon allows its share of a limit
        self.redis.stop()
        with self.daemon.client() as c:
            allowed = [c.request("ALLOW a p").startswith("ALLOWED") for _ in range(4)]
            self.assertEqual(allowed, [True, True, False, False])
            n = len(self.daemon.log_lines())
            self.daemon.reload(text(local_share="1"))
            self.daemon.wait_log(r"^info: reload: local_share 0\.5 -> 1$", start=n)
            self.daemon.wait_log(r"^info: reload: configuration .* loaded", start=n)
            allowed = [c.request("ALLOW b p").startswith("ALLOWED") for _ in range(5)]
            self.assertEqual(allowed, [True] * 4 + [False])

    def test_docs_list_what_a_reload_does_with_each_key(self):
        """docs/configuration.md's reload list is the tables': each key once,
        under the word `ratelimitd --reload-keys` gives it."""
        r = run_cli(["--reload-keys"])
        self.assertEqual(r.returncode, 0, r.stderr)
        kinds = dict(ln.split() for ln in r.stdout.splitlines())
        with open(os.path.join(SRCDIR, "docs", "configuration.md")) as f:
            text = f.read()
        block = text.split("<!-- reload-keys -->", 1)[1].split("<!-- /reload-keys -->", 1)[0]
        documented = {}
        # "- **KIND**, what it means: `key`, `key`, ..." over several lines
        items = re.split(r"^ *- \*\*([a-z-]+)\*\*", block, flags=re.M)[1:]
        for kind, body in zip(items[0::2], items[1::2]):
            for key in re.findall(r"`([^`]+)`", body.split(":", 1)[1]):
                self.assertNotIn(key, documented, "documented twice")
                documented[key] = kind
        self.assertEqual(documented, kinds)

    def test_man_page_marks_exactly_the_restart_keys(self):
        """man ratelimitd.yaml marks a key _restart_ when, and only when,
        the tables say only a restart applies it."""
        r = run_cli(["--reload-keys"])
        self.assertEqual(r.returncode, 0, r.stderr)
        kinds = dict(ln.split() for ln in r.stdout.splitlines())
        with open(os.path.join(SRCDIR, "man", "ratelimitd.yaml.5.scd")) as f:
            text = f.read()
        keys = text.split("# TOP-LEVEL KEYS", 1)[1].split("# EXAMPLE", 1)[0]
        parts = re.split(r"^\*([A-Za-z_.\[\]]+)\*$", keys, flags=re.M)[1:]
        marked = {k: "_restart_" in body.split("\n# ", 1)[0]
                  for k, body in zip(parts[0::2], parts[1::2])}
        self.assertEqual(sorted(marked), sorted(kinds))
        wrong = sorted(k for k in kinds if marked[k] != (kinds[k] == "restart"))
        self.assertEqual(wrong, [], "marked _restart_ or not, against --reload-keys")


if __name__ == "__main__":
    unittest.main()
