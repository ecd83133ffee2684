import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile, writeFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import {
  KEPT_PEERS_FILE,
  PeersKeeper,
  keptPeersFrom,
  readKeptPeers,
} from '../../src/swarm/agent/kept-peers.js';
import { tempDir } from '../helpers/fixtures.js';

test('kept peers: a missing, broken or foreign file is read as no peers', async () => {
  const dir = await tempDir('kept-peers');
  try {
    assert.deepEqual(await readKeptPeers(dir.path), [], 'no file');
    const path = join(dir.path, KEPT_PEERS_FILE);
    for (const text of [
      '{"not": "a list"}',
      '[1, 2]',
      '["ftp://x"]',
      '["http://a b"]',
      'not json',
      '["http://a"',
    ]) {
      await writeFile(path, text);
      assert.deepEqual(await readKeptPeers(dir.path), [], text);
    }
    await writeFile(path, JSON.stringify(Array.from({ length: 1025 }, (_, i) => `http://h${i}:7100`)));
    assert.deepEqual(await readKeptPeers(dir.path), [], 'more than the scheduler ever names');
    await writeFile(path, JSON.stringify([`http://${'x'.repeat(2100)}`]));
    assert.deepEqual(await readKeptPeers(dir.path), [], 'a URL longer than the protocol allows');
    await writeFile(path, '["http://10.0.0.1:7100", "https://h2:7100"]\n');
    assert.deepEqual(await readKeptPeers(dir.path), ['http://10.0.0.1:7100', 'https://h2:7100']);
    assert.deepEqual(keptPeersFrom(['http://a:1']), ['http://a:1']);
  } finally {
    await dir.cleanup();
  }
});

test('kept peers: lists kept in a row are written one at a time, the newest last; a directory gone loses only the hint', async () => {
  const dir = await tempDir('kept-peers-keep');
  try {
    const keeper = new PeersKeeper(dir.path);
    keeper.keep(['http://a:1']);
    keeper.keep(['http://a:1', 'http://b:2']);
    keeper.keep(['http://c:3']);
    await keeper.settled();
    assert.deepEqual(await readKeptPeers(dir.path), ['http://c:3']);
    keeper.keep([]);
    await keeper.settled();
    assert.equal(
      await readFile(join(dir.path, KEPT_PEERS_FILE), 'utf8'),
      '[]\n',
      'an empty list is kept too',
    );
    await rm(dir.path, { recursive: true, force: true });
    keeper.keep(['http://d:4']);
    await keeper.settled();
    assert.deepEqual(await readKeptPeers(dir.path), []);
  } finally {
    await dir.cleanup();
  }
});
