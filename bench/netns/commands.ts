/**
 * The command lines bench:fanout runs on the testbed's hosts, as pure functions so they can be read
 * and tested in one place: the wrapper that holds a process at the starting gate, the user's flow (`weightcast agent` and `weightcast pull`), the BitTorrent baseline
 * (mktorrent, opentracker, aria2c) and the socat + tee chain. Plus the parsers for what those tools
 * print (an info hash, a tracker scrape, `ss`'s listening sockets).
 */
import { launcherEnv } from '../../scripts/cluster.js';

/** Debian packages for the baseline legs, named in the message when a tool is missing. */
export const BASELINE_INSTALL_HINT = 'apt-get install aria2 opentracker mktorrent socat';
export const BITTORRENT_TOOLS = ['aria2c', 'opentracker', 'mktorrent', 'socat'] as const;
export const CHAIN_TOOLS = ['socat', 'tee', 'tar'] as const;

/** Ports inside the namespaces (every endpoint has an address of its own). */
export const TRACKER_PORT = 6969;
export const BITTORRENT_PORT = 6881;
export const CHAIN_PORT = 7300;
export const NODE_CHAIN_PORT = 7301;
export const NGINX_PORT = 8080;

/** The Debian package that provides the origin's nginx (`--origin-server`), named when it is missing. */
export const NGINX_INSTALL_HINT = 'apt-get install nginx-light';

/** What the leecher's completion hook prints (on aria2c's stderr, merged into stdout by the wrapper). */
export const BITTORRENT_COMPLETE_LINE = 'bittorrent: complete';
/** What a chain host prints once its copy is extracted. */
export const CHAIN_RECEIVED_LINE = 'chain: received';
/** What a node-chain host prints once every byte arrived and every piece matched (bench/node-relay.ts). */
export const NODE_CHAIN_RECEIVED_LINE = 'node-chain: received';
/** mktorrent's piece length is a power of two between these exponents (32 KiB to 256 MiB). */
const PIECE_EXPONENT_MIN = 15;
const PIECE_EXPONENT_MAX = 28;
/** socat's transfer buffer: its default of 8 KiB costs a system call pair per 8 KiB forwarded. */
const SOCAT_BUFFER_BYTES = 128 * 1024;
/** How often and how long a chain host's forwarder retries its successor before giving up. */
const CHAIN_CONNECT_RETRIES = 100;
const CHAIN_CONNECT_INTERVAL_SECONDS = 0.1;

export interface WrapOptions {
  /** Print `ready`, then wait for a line on stdin before exec'ing the command. */
  gate?: boolean;
  /** Send the command's stderr to stdout (aria2c's completion hook can only write to stderr). */
  mergeStderr?: boolean;
}

/**
 * `argv` behind a small shell that waits at the gate and then execs the command in place: the PID
 * stays the command's own, so the benchmark can move it into its leg's cgroup while it waits (from
 * the root namespace: inside `ip netns exec` /sys is the namespace's own and shows no cgroups), and
 * everything it forks after the release is counted there too.
 */
export function wrapCommand(argv: readonly string[], options: WrapOptions): string[] {
  if (options.gate !== true && options.mergeStderr !== true) return [...argv];
  const steps = options.gate === true ? ['echo ready', 'read go || exit 125'] : [];
  steps.push(options.mergeStderr === true ? 'exec "$@" 2>&1' : 'exec "$@"');
  return ['sh', '-c', steps.join('; '), 'wrap', ...argv];
}

/**
 * The `weightcast` command as a user starts it: `launcher` (bin/weightcast), which starts node and,
 * as for every user, keeps NODE_EXTRA_CA_CERTS from Node's start. With node flags (profiles: Node 20
 * refuses --cpu-prof in NODE_OPTIONS), `node FLAGS bin/weightcast.js` in the environment the
 * launcher would give it (launcherEnv).
 */
export function weightcastCommand(launcher: string, nodeFlags: readonly string[] = []): string[] {
  if (nodeFlags.length === 0) return [launcher];
  const moved = launcherEnv(process.env);
  const extra = moved['WEIGHTCAST_EXTRA_CA_CERTS'];
  const env = extra === undefined ? [] : ['-u', 'NODE_EXTRA_CA_CERTS', `WEIGHTCAST_EXTRA_CA_CERTS=${extra}`];
  return ['env', ...env, process.execPath, ...nodeFlags, `${launcher}.js`];
}

export interface UserFlowInput {
  /** The `weightcast` command (weightcastCommand). */
  weightcast: readonly string[];
  source: string;
  manifestPath: string;
  dir: string;
  agentUrl: string;
}

/**
 * The user's command on a host whose agent is running: the explicit local-agent form. This is the
 * one place to change when `pull` finds its local agent by itself.
 */
export function userPullArgv(input: UserFlowInput): string[] {
  const { weightcast, source, manifestPath, dir, agentUrl } = input;
  return [
    ...weightcast,
    'pull',
    source,
    '--manifest',
    manifestPath,
    '--to',
    dir,
    '--agent',
    agentUrl,
    '--json',
  ];
}

/**
 * nginx as the model's origin: a static file server over `root` (byte ranges and HEAD are built in),
 * one process in the foreground (no master, no daemon: the PID the benchmark starts is the one that
 * serves, so its CPU is counted in the leg's cgroup and SIGTERM stops it), `sendfile` as a typical
 * deployment has it, no access log. Everything it writes goes under `dir`.
 */
export function nginxOriginConfig(input: {
  address: string;
  port: number;
  root: string;
  dir: string;
}): string {
  const { address, port, root, dir } = input;
  for (const [what, value] of Object.entries({ root, dir })) {
    // nginx's configuration syntax has no quoting we rely on: refuse what would need it.
    if (!/^[A-Za-z0-9_./-]+$/.test(value)) throw new Error(`nginx config: ${what} ${value} needs quoting`);
  }
  const temp = `${dir}/temp`;
  return [
    'daemon off;',
    'master_process off;',
    'worker_processes 1;',
    `pid ${dir}/nginx.pid;`,
    'error_log stderr warn;',
    'events { worker_connections 1024; }',
    'http {',
    '  access_log off;',
    '  sendfile on;',
    '  tcp_nopush on;',
    '  keepalive_requests 1000000;',
    '  default_type application/octet-stream;',
    ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((kind) => `  ${kind}_temp_path ${temp};`),
    `  server { listen ${address}:${port}; root ${root}; }`,
    '}',
    '',
  ].join('\n');
}

/** nginx in the foreground on `configPath`, with `dir` as its prefix. */
export function nginxArgv(configPath: string, dir: string): string[] {
  return ['nginx', '-c', configPath, '-p', dir];
}

/** mktorrent's `-l`: the power of two nearest `pieceBytes`, within what mktorrent accepts. */
export function pieceLengthExponent(pieceBytes: number): number {
  const exponent = Math.round(Math.log2(pieceBytes));
  return Math.min(PIECE_EXPONENT_MAX, Math.max(PIECE_EXPONENT_MIN, exponent));
}

export function trackerAnnounceUrl(address: string): string {
  return `http://${address}:${TRACKER_PORT}/announce`;
}

/** A private torrent of `modelDir` named `name`, announcing to the tracker on the origin's host. */
export function mktorrentArgv(input: {
  modelDir: string;
  name: string;
  trackerAddress: string;
  pieceBytes: number;
  torrentPath: string;
}): string[] {
  return [
    'mktorrent',
    '--private',
    '--no-date',
    `--piece-length=${pieceLengthExponent(input.pieceBytes)}`,
    `--announce=${trackerAnnounceUrl(input.trackerAddress)}`,
    `--name=${input.name}`,
    `--output=${input.torrentPath}`,
    input.modelDir,
  ];
}

/**
 * opentracker on the origin's address. Debian's build only serves whitelisted info hashes; it chroots
 * to `dir` first, so the whitelist is named relative to it.
 */
export function opentrackerArgv(input: { address: string; dir: string; whitelistName: string }): string[] {
  const port = String(TRACKER_PORT);
  return [
    'opentracker',
    '-i',
    input.address,
    '-p',
    port,
    '-P',
    port,
    '-d',
    input.dir,
    '-w',
    input.whitelistName,
  ];
}

/**
 * aria2c seeding (`--check-integrity`: it hashes the origin's files before it serves them, before the
 * clock starts) or leeching into `dir` and then seeding on (`--seed-ratio=0.0`: until stopped). Peers
 * come from the tracker alone: no DHT, no local peer discovery, no peer exchange, IPv4 only (the
 * testbed's addresses). `--stop-with-process` ends it if the benchmark dies.
 */
export function aria2cArgv(input: {
  role: 'seeder' | 'leecher';
  torrentPath: string;
  dir: string;
  benchPid: number;
  completionHook?: string;
}): string[] {
  return [
    'aria2c',
    '--enable-dht=false',
    '--enable-dht6=false',
    '--bt-enable-lpd=false',
    '--enable-peer-exchange=false',
    '--disable-ipv6=true',
    '--seed-ratio=0.0',
    '--file-allocation=none',
    '--allow-overwrite=true',
    '--auto-file-renaming=false',
    '--summary-interval=0',
    '--show-console-readout=false',
    '--console-log-level=warn',
    `--listen-port=${BITTORRENT_PORT}`,
    `--stop-with-process=${input.benchPid}`,
    `--dir=${input.dir}`,
    ...(input.role === 'seeder' ? ['--check-integrity=true'] : []),
    ...(input.completionHook === undefined ? [] : [`--on-bt-download-complete=${input.completionHook}`]),
    input.torrentPath,
  ];
}

/** The hook aria2c runs when a download is complete (before it goes on seeding); $3 is the first file. */
export function completionHookScript(): string {
  return `#!/bin/sh\necho "${BITTORRENT_COMPLETE_LINE} $3" >&2\n`;
}

/** The info hash from `aria2c --show-files` output, lowercase hex. */
export function parseInfoHash(showFiles: string): string | undefined {
  return /^Info Hash: ([0-9a-fA-F]{40})\s*$/m.exec(showFiles)?.[1]?.toLowerCase();
}

/** `%72%94...`: a binary info hash as a URL query value. */
export function percentEncodeHex(hex: string): string {
  return hex.replace(/(..)/g, '%$1');
}

/** An HTTP/1.0 scrape of one info hash from the tracker, by socat (run in a testbed namespace). */
export function scrapeArgv(trackerAddress: string, infoHashHex: string): string[] {
  return [
    'sh',
    '-c',
    'printf "GET /scrape?info_hash=%s HTTP/1.0\\r\\n\\r\\n" "$1" | socat -t 5 -T 5 - TCP:"$2":"$3"',
    'scrape',
    percentEncodeHex(infoHashHex),
    trackerAddress,
    String(TRACKER_PORT),
  ];
}

/** Seeds the tracker knows for the scraped torrent (bencoded `complete`), or undefined. */
export function parseScrapeSeeds(response: string): number | undefined {
  const match = /8:completei(\d+)e/.exec(response);
  return match?.[1] === undefined ? undefined : Number(match[1]);
}

/** Whether `ss -Hltn` output shows a socket listening on `port`. */
export function listensOn(ssOutput: string, port: number): boolean {
  return ssOutput.split('\n').some((line) => line.trim().split(/\s+/)[3]?.endsWith(`:${port}`) === true);
}

/**
 * One chain host: accept the stream from the predecessor, pass every byte on to the successor as it
 * arrives (tee into a FIFO that a second socat sends on) and extract it into `dir`. Prints
 * CHAIN_RECEIVED_LINE once its own copy is extracted, then waits for its forwarder to finish.
 * No verification, no scheduling: the ceiling of this testbed.
 */
export function chainHostArgv(input: {
  listenAddress: string;
  dir: string;
  fifo: string;
  nextAddress: string | undefined;
}): string[] {
  const listen = `socat -u -b ${SOCAT_BUFFER_BYTES} TCP-LISTEN:"$2",bind="$1",reuseaddr STDOUT`;
  const forward =
    `socat -u -b ${SOCAT_BUFFER_BYTES} STDIN ` +
    `TCP:"$5":"$2",retry=${CHAIN_CONNECT_RETRIES},interval=${CHAIN_CONNECT_INTERVAL_SECONDS} < "$4" &`;
  // tar stops reading at the archive's end marker: the rest of its last record is drained, so tee
  // never meets a closed pipe before it has passed every byte on (it did: one run in a few lost its
  // successor's tail, and the host exited without its line).
  const extract = '{ tar -xf - -C "$3"; s=$?; cat > /dev/null; exit "$s"; }';
  const script = [
    'set -u',
    'if [ -n "$5" ]; then',
    '  mkfifo "$4" || exit 125',
    `  ${forward}`,
    `  ${listen} | tee "$4" | ${extract}`,
    'else',
    `  ${listen} | ${extract}`,
    'fi',
    'status=$?',
    `[ "$status" -eq 0 ] && echo "${CHAIN_RECEIVED_LINE}"`,
    'wait',
    'exit "$status"',
  ].join('\n');
  return [
    'sh',
    '-c',
    script,
    'chain-host',
    input.listenAddress,
    String(CHAIN_PORT),
    input.dir,
    input.fifo,
    input.nextAddress ?? '',
  ];
}

/** The chain's head: the origin's model directory as one tar stream to the first host. */
export function chainOriginArgv(input: { modelDir: string; firstAddress: string }): string[] {
  return [
    'sh',
    '-c',
    `tar -cf - -C "$1" . | socat -u -b ${SOCAT_BUFFER_BYTES} STDIN TCP:"$2":"$3"`,
    'chain-origin',
    input.modelDir,
    input.firstAddress,
    String(CHAIN_PORT),
  ];
}

/** `ss` listing the established TCP connections on local port `port`, with their TCP info. */
export function ssConnectionsArgv(port: number): string[] {
  return ['ss', '-Htin', 'state', 'established', `( sport = :${port} )`];
}

/**
 * The smoothed round-trip times (ms) in `ss -i` output, one per connection that sent something in the
 * last `activeMs` (its `lastsnd`; a connection that does not say counts). An idle connection's RTT is
 * as of its last exchange: agents keep their registration's connection open, idle from the quiet
 * start on, and counting those made the scheduler's p50 look several times faster than its traffic.
 */
export function parseSsRttsMs(ssOutput: string, activeMs = Number.POSITIVE_INFINITY): number[] {
  const rtts: number[] = [];
  for (const line of ssOutput.split('\n')) {
    const rtt = /\brtt:([\d.]+)\//.exec(line);
    if (rtt === null) continue;
    const lastSend = /\blastsnd:(\d+)/.exec(line);
    if (lastSend !== null && Number(lastSend[1]) > activeMs) continue;
    rtts.push(Number(rtt[1]));
  }
  return rtts;
}

/**
 * The store-ring leg's origin (bench/ring-relay.ts): it listens for all `hosts`, says `ready` once
 * every one is connected (each only once its ring links are up), and sends each host its pieces when
 * its stdin says go.
 */
export function storeRingOriginArgv(input: {
  node: string;
  relay: string;
  modelDir: string;
  manifestPath: string;
  address: string;
  hosts: number;
  /** NODE_CHAIN_PORT in the namespaces; a free one on loopback (tests). */
  port?: number;
}): string[] {
  const { node, relay, modelDir, manifestPath, address, hosts, port = NODE_CHAIN_PORT } = input;
  return [
    ...[node, relay, '--origin', modelDir, '--manifest', manifestPath],
    ...['--listen', `${address}:${port}`, '--hosts', String(hosts)],
  ];
}

/**
 * A store-ring host `index` of `hosts`: it listens for its successor at `listen`, connects to its
 * predecessor at `upstream` and then to the origin, and keeps and pushes on pieces
 * (bench/ring-relay.ts). Addresses are ADDRESS:PORT.
 */
export function storeRingHostArgv(input: {
  node: string;
  relay: string;
  dir: string;
  manifestPath: string;
  hosts: number;
  index: number;
  origin: string;
  upstream: string;
  listen: string;
}): string[] {
  const { node, relay, dir, manifestPath, hosts, index, origin, upstream, listen } = input;
  return [
    ...[node, relay, '--relay', dir, '--manifest', manifestPath, '--hosts', String(hosts)],
    ...['--index', String(index), '--origin', origin, '--upstream', upstream, '--listen', listen],
  ];
}

/**
 * The node-chain leg's origin (bench/node-relay.ts): it listens for host1, says `ready` once host1 is
 * connected, and sends the model's files in the manifest's order when its stdin says go.
 */
export function nodeChainOriginArgv(input: {
  node: string;
  relay: string;
  modelDir: string;
  manifestPath: string;
  address: string;
  /** NODE_CHAIN_PORT in the namespaces; a free one on loopback (tests). */
  port?: number;
}): string[] {
  const { node, relay, modelDir, manifestPath, address, port = NODE_CHAIN_PORT } = input;
  return [node, relay, '--origin', modelDir, '--manifest', manifestPath, '--listen', `${address}:${port}`];
}

/**
 * A node-chain host: it waits for its successor to connect (unless it is the last), then connects to
 * its predecessor and relays, hashes and stores what arrives (bench/node-relay.ts).
 */
export function nodeChainHostArgv(input: {
  node: string;
  relay: string;
  dir: string;
  manifestPath: string;
  upstreamAddress: string;
  listenAddress: string | undefined;
  /** The predecessor's port and this host's: NODE_CHAIN_PORT in the namespaces (an address per host). */
  upstreamPort?: number;
  listenPort?: number;
  /** Keep pieces as an agent does (`--store`: the store-chain leg). */
  store?: boolean;
}): string[] {
  const { node, relay, dir, manifestPath, upstreamAddress, listenAddress } = input;
  const { upstreamPort = NODE_CHAIN_PORT, listenPort = NODE_CHAIN_PORT } = input;
  return [
    node,
    relay,
    '--relay',
    dir,
    '--manifest',
    manifestPath,
    '--upstream',
    `${upstreamAddress}:${upstreamPort}`,
    ...(listenAddress === undefined ? [] : ['--listen', `${listenAddress}:${listenPort}`]),
    ...(input.store === true ? ['--store'] : []),
  ];
}
