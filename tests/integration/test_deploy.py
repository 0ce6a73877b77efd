"""deploy/: the Kubernetes manifests (a kustomize base and its overlays)
rendered offline by `kubectl kustomize`, and checked against what they run:
the image scripts/image builds (its user, its command's config path, its
name and version), the daemon (the configuration each mounts loads with
`ratelimitd -t`, its files materialized from the rendered ConfigMaps and
Secrets; its listeners are the container's ports and the Service's; the
probes ask the metrics listener for /readyz and /livez; watch: true and
whole-directory mounts, without which a changed ConfigMap never reaches
it), and the gateway examples of docs/envoy.md (they name the envoy
overlay's Service, port and domain). No cluster runs here: docs/deployment.md
says what this does not cover."""

import base64
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import yaml

from harness import DAEMON, SRCDIR

DEPLOY = os.path.join(SRCDIR, "deploy")
TARGETS = ["base", "overlays/production", "overlays/redis-tls", "overlays/envoy"]
KUBECTL = shutil.which("kubectl")


def image_facts():
    """What scripts/image gives the image: user, config path, name:version."""
    with open(os.path.join(SRCDIR, "scripts", "image")) as f:
        text = f.read()
    user = re.search(r"--user (\d+):(\d+)", text)
    cmd = re.search(r"--cmd '(\[.*?\])'", text)
    name = re.search(r'--name "([a-z0-9-]+):\$version"', text)
    assert user and cmd and name, "scripts/image no longer names --user, --cmd, --name"
    args = yaml.safe_load(cmd.group(1))
    config = args[args.index("-c") + 1]
    with open(os.path.join(SRCDIR, "meson.build")) as f:
        version = re.search(r"version\s*:\s*'([^']+)'", f.read()).group(1)
    return {"uid": int(user.group(1)), "gid": int(user.group(2)), "config": config,
            "name": name.group(1), "version": version}


def render(target):
    r = subprocess.run([KUBECTL, "kustomize", os.path.join(DEPLOY, target)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError("kubectl kustomize deploy/%s: %s" % (target, r.stderr))
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def duration_s(text):
    m = re.fullmatch(r"(\d+)(ms|s)", str(text))
    return int(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


class DeployTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not KUBECTL:
            raise AssertionError("kubectl not found: this machine should have it (kubectl "
                                 "1.32, whose `kubectl kustomize` renders offline)")
        cls.image = image_facts()

    def objects(self, target):
        docs = render(target)
        by = {}
        for d in docs:
            by.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
        return by

    def volume_files(self, objs, pod):
        """mountPath -> {file name: bytes} of every mounted ConfigMap/Secret."""
        vols = {v["name"]: v for v in pod["volumes"]}
        files = {}
        for m in pod["containers"][0]["volumeMounts"]:
            self.assertNotIn("subPath", m, "%s: a subPath mount is never updated by the "
                             "kubelet: the daemon would not see a change" % m["mountPath"])
            v = vols[m["name"]]
            if "configMap" in v:
                data = {k: s.encode() for k, s in objs["ConfigMap"][v["configMap"]["name"]]
                        .get("data", {}).items()}
            elif "secret" in v:
                data = {k: base64.b64decode(s) for k, s in
                        objs["Secret"][v["secret"]["secretName"]].get("data", {}).items()}
            else:
                self.fail("volume %s is neither a ConfigMap nor a Secret" % m["name"])
            files[m["mountPath"]] = data
        return files

    def check_target(self, target):
        img = self.image
        objs = self.objects(target)
        dep = objs["Deployment"]["ratelimitd"]
        pod = dep["spec"]["template"]["spec"]
        labels = dep["spec"]["template"]["metadata"]["labels"]
        sel = dep["spec"]["selector"]["matchLabels"]
        self.assertLessEqual(sel.items(), labels.items())
        c = pod["containers"][0]
        # the image scripts/image builds, at this version
        self.assertRegex(c["image"], r"(^|/)%s:%s$" % (img["name"], re.escape(img["version"])))
        self.assertNotIn("command", c)  # the image's own entrypoint and config path
        self.assertNotIn("args", c)
        # non-root as the image's user, read-only root, no capabilities
        psc, csc = pod["securityContext"], c["securityContext"]
        self.assertTrue(psc["runAsNonRoot"])
        self.assertEqual((psc["runAsUser"], psc["runAsGroup"]), (img["uid"], img["gid"]))
        self.assertTrue(csc["readOnlyRootFilesystem"])
        self.assertFalse(csc["allowPrivilegeEscalation"])
        self.assertEqual(csc["capabilities"]["drop"], ["ALL"])
        # the configuration, where the image reads it
        files = self.volume_files(objs, pod)
        cdir, cname = os.path.split(img["config"])
        self.assertIn(cdir, files, "nothing mounted at %s" % cdir)
        self.assertIn(cname, files[cdir])
        cfg_text = files[cdir][cname].decode()
        cfg = yaml.safe_load(cfg_text)
        self.assertIs(cfg.get("watch"), True, "watch: true, or a changed ConfigMap is ignored")
        # every listener is a container port and a Service port, and back
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        listen = [(l if isinstance(l, str) else l["address"]) for l in cfg["listen"]]
        listen_ports = {int(a.rsplit(":", 1)[1]) for a in listen}
        for a in listen:
            self.assertTrue(a.startswith("0.0.0.0:"), "%s: a pod's traffic comes from "
                            "outside its loopback" % a)
        mport = int(cfg["metrics"]["listen"].rsplit(":", 1)[1])
        self.assertEqual(set(ports.values()), listen_ports | {mport})
        svc = objs["Service"]["ratelimitd"]
        self.assertLessEqual(svc["spec"]["selector"].items(), labels.items())
        for p in svc["spec"]["ports"]:
            self.assertIn(p["targetPort"], ports, p)
            self.assertEqual(p["port"], ports[p["targetPort"]])
        # the probes: the metrics listener's /readyz and /livez
        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
            get = c[probe]["httpGet"]
            self.assertEqual(get["path"], path)
            self.assertEqual(ports[get["port"]], mport)
        # SIGTERM after preStop; the drain (redis.timeout + 2 s) fits in the grace
        stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
        drain = duration_s(cfg.get("redis", {}).get("timeout", "1s")) + 2
        self.assertGreater(pod["terminationGracePeriodSeconds"], stop + drain)
        # the PodDisruptionBudget holds these pods
        pdb = objs["PodDisruptionBudget"]["ratelimitd"]
        self.assertLessEqual(pdb["spec"]["selector"]["matchLabels"].items(), labels.items())
        # the daemon takes the configuration with the files it names, as mounted
        with tempfile.TemporaryDirectory() as tmp:
            for mount, data in files.items():
                d = os.path.join(tmp, mount.lstrip("/"))
                os.makedirs(d, exist_ok=True)
                for name, content in data.items():
                    with open(os.path.join(d, name), "wb") as f:
                        f.write(content)
            text = cfg_text
            for mount in sorted(files, key=len, reverse=True):
                text = re.sub(r"(?<![\w/])%s(?=/|\b)" % re.escape(mount),
                              os.path.join(tmp, mount.lstrip("/")), text)
            path = os.path.join(tmp, "checked.yaml")
            with open(path, "w") as f:
                f.write(text)
            r = subprocess.run([DAEMON, "-t", "-c", path], capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 0, "deploy/%s: %s" % (target, r.stderr))
        return objs, cfg

    def test_base_and_every_overlay(self):
        for target in TARGETS:
            with self.subTest(target=target):
                self.check_target(target)

    def test_overlays_change_what_they_say(self):
        base = yaml.safe_load(self.configmap("base"))
        prod_objs, prod = self.check_target("overlays/production")
        self.assertEqual(prod_objs["Deployment"]["ratelimitd"]["spec"]["replicas"], 3)
        self.assertNotEqual(prod["redis"]["address"], base["redis"]["address"])
        self.assertIn("upload", prod["policies"])
        _, tls = self.check_target("overlays/redis-tls")
        self.assertTrue(tls["redis"]["tls"]["ca_file"].startswith("/etc/ratelimitd-redis/"))
        envoy_objs, envoy = self.check_target("overlays/envoy")
        grpc = [l for l in envoy["listen"] if isinstance(l, dict)
                and l.get("protocol") == "grpc"]
        self.assertEqual(len(grpc), 1)
        self.assertIn("grpc", [p["name"] for p in envoy_objs["Service"]["ratelimitd"]["spec"]
                               ["ports"]])

    def configmap(self, target):
        return self.objects(target)["ConfigMap"]["ratelimitd-config"]["data"]["ratelimitd.yaml"]

    def test_envoy_docs_gateways_name_the_envoy_overlay(self):
        """docs/envoy.md's Istio, Envoy Gateway and AI gateway blocks parse,
        and name the envoy overlay's Service, gRPC port and rules' domain."""
        objs, cfg = self.check_target("overlays/envoy")
        svc = objs["Service"]["ratelimitd"]
        port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc")
        rules = yaml.safe_load(objs["ConfigMap"]["ratelimitd-envoy-rules"]["data"]["rules.yaml"])
        with open(os.path.join(SRCDIR, "docs", "envoy.md")) as f:
            text = f.read()
        blocks = re.findall(r"<!-- example: skip=kubernetes -->\s*```yaml\n(.*?)```", text, re.S)
        self.assertEqual(len(blocks), 3, "Istio, Envoy Gateway, the AI gateway's limits")
        istio = list(yaml.safe_load_all(blocks[0]))
        self.assertIn("outbound|%d||%s.default.svc.cluster.local"
                      % (port, svc["metadata"]["name"]), blocks[0])
        self.assertEqual(istio[0]["spec"]["configPatches"][0]["patch"]["value"]["typed_config"]
                         ["domain"], rules["domain"])
        eg = yaml.safe_load(blocks[1])
        cluster = eg["spec"]["jsonPatches"][2]["operation"]["value"]
        addr = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"][
            "address"]["socket_address"]
        self.assertEqual((addr["address"], addr["port_value"]),
                         ("%s.default.svc.cluster.local" % svc["metadata"]["name"], port))
        self.assertEqual(eg["spec"]["jsonPatches"][0]["operation"]["value"]["typed_config"]
                         ["domain"], rules["domain"])
        ai = yaml.safe_load(blocks[2])
        charged = ai["rate_limits"][1]
        self.assertTrue(charged["apply_on_stream_done"])
        self.assertEqual(charged["actions"][0]["generic_key"]["descriptor_key"],
                         "ratelimitd_charge")


if __name__ == "__main__":
    unittest.main()
