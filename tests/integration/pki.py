"""pki.py - certificates for the TLS tests, made by the openssl command in a
test's temporary directory: a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate, and the bad ones a deployment meets (signed
by another CA, for another name, expired).

    p = Pki(tmpdir)
    p.ca, p.server_cert, p.server_key, p.client_cert, p.client_key
    p.other_ca                       # a CA that signed none of the above
    p.cert("wrong-name", dns=["elsewhere.example"])  -> (cert, key)
    p.cert("expired", expired=True)  -> (cert, key), already expired
"""

import os
import subprocess
import time

OPENSSL = "openssl"


def _run(argv, cwd):
    r = subprocess.run([OPENSSL] + argv, cwd=cwd, capture_output=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise AssertionError("openssl %s failed: %s" % (" ".join(argv), r.stderr.decode()))


class Pki:
    def __init__(self, tmpdir):
        self.dir = os.path.join(tmpdir, "pki")
        os.makedirs(self.dir, exist_ok=True)
        self.ca, self.ca_key = self._ca("ca")
        self.other_ca, self.other_ca_key = self._ca("other-ca")
        self.server_cert, self.server_key = self.cert("server", ips=["127.0.0.1"],
                                                      dns=["localhost"])
        self.client_cert, self.client_key = self.cert("client", client=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def _key(self, name):
        _run(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
              "-out", name + ".key"], self.dir)
        return self.path(name + ".key")

    def _ca(self, name):
        key = self._key(name)
        _run(["req", "-x509", "-new", "-key", key, "-out", name + ".pem", "-days", "2",
              "-subj", "/CN=ratelimitd test %s" % name,
              "-addext", "basicConstraints=critical,CA:TRUE",
              "-addext", "keyUsage=critical,keyCertSign,cRLSign"], self.dir)
        return self.path(name + ".pem"), key

    def cert(self, name, ips=(), dns=(), client=False, expired=False, ca="ca"):
        """A leaf certificate signed by `ca` ("ca" or "other-ca"); (cert, key)."""
        key = self._key(name)
        _run(["req", "-new", "-key", key, "-out", name + ".csr", "-subj", "/CN=%s" % name],
             self.dir)
        sans = ["IP:%s" % i for i in ips] + ["DNS:%s" % d for d in dns]
        ext = ["basicConstraints=CA:FALSE",
               "extendedKeyUsage=%s" % ("clientAuth" if client else "serverAuth,clientAuth")]
        if sans:
            ext.append("subjectAltName=" + ",".join(sans))
        with open(self.path(name + ".ext"), "w") as f:
            f.write("\n".join(ext) + "\n")
        _run(["x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
              "-CAcreateserial", "-out", name + ".pem", "-days", "0" if expired else "2",
              "-extfile", name + ".ext"], self.dir)
        if expired:
            time.sleep(1.1)  # notAfter is the second it was made
        return self.path(name + ".pem"), key
