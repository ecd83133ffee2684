import { test } from 'node:test';
import assert from 'node:assert/strict';
import { memoryIo, reportError } from '../../src/cli/io.js';

function systemError(code: string, syscall: string, path?: string): Error {
  return Object.assign(new Error(`${syscall} ${code}`), { code, syscall, ...(path ? { path } : {}) });
}

test('reportError names what a raw system error was doing, not always the file system', () => {
  const lookup = memoryIo();
  assert.equal(reportError(lookup, systemError('ENOTFOUND', 'getaddrinfo'), false), 1);
  assert.equal(lookup.err.join(''), 'weightcast: IO: host name lookup: getaddrinfo ENOTFOUND\n');

  const file = memoryIo();
  reportError(file, systemError('ENOSPC', 'write', '/x'), false);
  assert.equal(file.err.join(''), 'weightcast: IO: file system: write ENOSPC\n');

  // Node's own ERR_* codes are not I/O: they are reported as what they are, a bug.
  const misuse = memoryIo();
  const invalid = Object.assign(new TypeError('File URL host must be "localhost"'), {
    code: 'ERR_INVALID_FILE_URL_HOST',
  });
  assert.equal(reportError(misuse, invalid, false), 1);
  assert.match(misuse.err.join(''), /^weightcast: internal error: TypeError/);
});
