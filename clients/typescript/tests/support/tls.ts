/** Certificates for a test server with TLS on, made with `openssl`. */

import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

/** A CA, and a certificate for 127.0.0.1 that it signed (with its key), written into `dir`. */
export function testCertificates(dir: string): { ca: string; cert: string; key: string } {
  // Every argument is one word: the commands are written as they would be typed.
  const openssl = (command: string) => execFileSync("openssl", command.split(" "), { cwd: dir, stdio: "pipe" });
  const newKey = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  openssl(`req -x509 ${newKey} -keyout ca.key -out ca.pem -days 2 -subj /CN=fencelock-test-CA`);
  openssl(`req ${newKey} -keyout key.pem -out server.csr -subj /CN=127.0.0.1`);
  // What a TLS client checks: the address as a name, a certificate that is no CA, for a server.
  const ext = "subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\nextendedKeyUsage = serverAuth\n";
  writeFileSync(join(dir, "ext.cnf"), ext);
  openssl("x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cert.pem -days 2 -extfile ext.cnf");
  return { ca: join(dir, "ca.pem"), cert: join(dir, "cert.pem"), key: join(dir, "key.pem") };
}
