/**
 * A certificate authority and certificates for TLS tests, made with the `openssl` CLI in a temporary
 * directory: each leaf names 127.0.0.1 and localhost and may serve and present itself as a client.
 */

import { execFile } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface TestCertificate {
  cert: string;
  key: string;
  certFile: string;
  keyFile: string;
}

export interface TestCa {
  /** The CA certificate (PEM) and its file. */
  ca: string;
  caFile: string;
  /** A certificate signed by this CA, named `name` in `dir`. */
  issue(name: string): Promise<TestCertificate>;
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

export async function makeTestCa(dir: string, label: string): Promise<TestCa> {
  const caFile = join(dir, `${label}-ca.crt`);
  const caKey = join(dir, `${label}-ca.key`);
  await run(
    'openssl',
    [
      'req',
      '-x509',
      ...EC,
      '-keyout',
      caKey,
      '-out',
      caFile,
      '-days',
      '2',
      '-subj',
      `/CN=weightcast test CA ${label}`,
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    { timeout: 20_000 },
  );
  const extFile = join(dir, `${label}-leaf.ext`);
  await writeFile(
    extFile,
    'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n',
  );
  let serial = 1;
  return {
    ca: await readFile(caFile, 'utf8'),
    caFile,
    issue: async (name) => {
      const keyFile = join(dir, `${label}-${name}.key`);
      const csr = join(dir, `${label}-${name}.csr`);
      const certFile = join(dir, `${label}-${name}.crt`);
      await run('openssl', ['req', ...EC, '-keyout', keyFile, '-out', csr, '-subj', `/CN=${name}`], {
        timeout: 20_000,
      });
      await run(
        'openssl',
        [
          'x509',
          '-req',
          '-in',
          csr,
          '-CA',
          caFile,
          '-CAkey',
          caKey,
          '-set_serial',
          String(serial++),
          '-days',
          '2',
          '-out',
          certFile,
          '-extfile',
          extFile,
        ],
        { timeout: 20_000 },
      );
      return {
        cert: await readFile(certFile, 'utf8'),
        key: await readFile(keyFile, 'utf8'),
        certFile,
        keyFile,
      };
    },
  };
}
