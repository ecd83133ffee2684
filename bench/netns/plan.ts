/**
 * The testbed's layout as pure data: which namespaces, links and addresses a run creates, and the
 * `tc` arguments that cap each link. `testbed.ts` carries the plan out; keeping the arithmetic here
 * lets it be tested without root.
 *
 * Layout: endpoint 0 is the origin, endpoints 1..N are the hosts. Each endpoint is a network
 * namespace whose `eth0` is one end of a veth pair; the other end sits in the root namespace as a
 * port of a private bridge. Egress of `eth0` is the endpoint's upload, egress of the bridge port is
 * its download, and each gets its own token bucket. No address is put on the bridge, so nothing
 * of the testbed is routable from the root namespace and two testbeds with the same subnet do not
 * meet.
 */

/** Interface names are limited by the kernel to 15 bytes (IFNAMSIZ - 1). */
export const INTERFACE_NAME_BYTES_MAX = 15;
/** Hosts in one testbed: the /24 has 253 usable addresses and each host costs a few processes. */
export const HOSTS_MAX = 200;
export const MBPS_MIN = 1;
export const MBPS_MAX = 100_000;

/** Ethernet's standard MTU; what a testbed uses unless told otherwise. */
export const MTU_DEFAULT = 1500;
/** IPv6's minimum, and the usual jumbo-frame size (veth takes up to 64 KiB, but NICs stop near 9216). */
export const MTU_MIN = 1280;
export const MTU_MAX = 9216;
/** Bytes tbf counts per full-size frame beyond the MTU: the Ethernet header. */
const ETHERNET_HEADER_BYTES = 14;
/** IPv4 (20), TCP (20) and the timestamp option (12) inside every frame's MTU. */
const IP_TCP_HEADER_BYTES = 52;

/** The bucket holds at least one 64 KiB GSO segment, so tbf never has to split a large packet. */
const BURST_BYTES_MIN = 128 * 1024;
/** Above the minimum, the bucket holds this much time at the capped rate. */
const BURST_MS = 5;
/** How long a packet may wait in a capped queue before tbf drops it. */
export const QUEUE_LATENCY_MS = 50;

export interface Endpoint {
  /** `origin`, `host1`..`hostN` or `control`: what tables and logs call it. */
  label: string;
  /** Network namespace name. */
  ns: string;
  /** The bridge port in the root namespace; its egress is this endpoint's download. */
  bridgePort: string;
  /** The other veth end, created in the root namespace, then moved into `ns` and renamed `eth0`. */
  peer: string;
  /** IPv4 address of `eth0` inside the namespace. */
  address: string;
  /** Upload (egress of eth0) and download (egress of the bridge port) cap, Mbit/s. */
  mbps: number;
}

/**
 * The share of a capped link that TCP payload can use: tbf counts every frame whole (Ethernet, IP and
 * TCP headers), so a bulk flow of full-size frames carries (MTU - 52) payload bytes per (MTU + 14).
 * 0.956 at MTU 1500, 0.993 at 9000.
 */
export function tcpPayloadShare(mtu: number): number {
  return (mtu - IP_TCP_HEADER_BYTES) / (mtu + ETHERNET_HEADER_BYTES);
}

export interface TestbedPlan {
  tag: string;
  bridge: string;
  origin: Endpoint;
  hosts: Endpoint[];
  /**
   * A machine of its own for control-plane services, capped like a host: the swarm's scheduler
   * with `bench:fanout --scheduler-on control`. By default the scheduler runs on the origin's host,
   * as it is often deployed, and its messages queue behind the origin's data in the capped link
   * (tbf holds up to 50 ms).
   */
  control: Endpoint;
  prefixLength: 24;
  /** Every veth end's MTU (the bridge follows its ports). */
  mtu: number;
}

export interface PlanInput {
  /** Short unique prefix, e.g. `wc12345k`: letters and digits, at most 10 characters. */
  tag: string;
  hosts: number;
  hostMbps: number;
  originMbps: number;
  /** First three octets of the /24, e.g. `10.77.0`. */
  subnet: string;
  /** Every link's MTU (default MTU_DEFAULT). */
  mtu?: number;
}

export class PlanError extends Error {
  override name = 'PlanError';
}

/** A unique-enough tag: `wc` + the process id + one random letter (so a reused pid still differs). */
export function testbedTag(pid: number, randomLetterIndex: number): string {
  const letter = String.fromCharCode(97 + (Math.abs(Math.trunc(randomLetterIndex)) % 26));
  return `wc${pid}${letter}`;
}

export function planTestbed(input: PlanInput): TestbedPlan {
  checkInput(input);
  const endpoint = (index: number, label: string, mbps: number): Endpoint => ({
    label,
    ns: `${input.tag}n${index}`,
    bridgePort: `${input.tag}v${index}`,
    peer: `${input.tag}p${index}`,
    address: `${input.subnet}.${index + 1}`,
    mbps,
  });
  const origin = endpoint(0, 'origin', input.originMbps);
  const hosts = Array.from({ length: input.hosts }, (_, i) =>
    endpoint(i + 1, `host${i + 1}`, input.hostMbps),
  );
  const plan: TestbedPlan = {
    tag: input.tag,
    bridge: `${input.tag}br`,
    origin,
    hosts,
    control: endpoint(input.hosts + 1, 'control', input.hostMbps),
    prefixLength: 24,
    mtu: input.mtu ?? MTU_DEFAULT,
  };
  for (const name of interfaceNames(plan)) {
    if (Buffer.byteLength(name) > INTERFACE_NAME_BYTES_MAX) {
      throw new PlanError(`interface name ${name} is longer than ${INTERFACE_NAME_BYTES_MAX} bytes`);
    }
  }
  return plan;
}

/** Every interface name the testbed creates in the root namespace (peers only until they move). */
export function interfaceNames(plan: TestbedPlan): string[] {
  const endpoints = [plan.origin, ...plan.hosts, plan.control];
  return [plan.bridge, ...endpoints.flatMap((e) => [e.bridgePort, e.peer])];
}

/**
 * `tc qdisc add dev DEV root tbf ...` arguments after `dev DEV root`: a token bucket at `mbps`.
 * tbf counts every packet's headers, so TCP payload tops out near `tcpPayloadShare(mtu)` of the rate.
 */
export function tbfArguments(mbps: number): string[] {
  const bytesPerSecond = (mbps * 1e6) / 8;
  const burstBytes = Math.max(BURST_BYTES_MIN, Math.ceil((bytesPerSecond * BURST_MS) / 1000));
  return ['tbf', 'rate', `${mbps}mbit`, 'burst', String(burstBytes), 'latency', `${QUEUE_LATENCY_MS}ms`];
}

function checkInput(input: PlanInput): void {
  if (!/^[a-z0-9]{1,10}$/.test(input.tag)) {
    throw new PlanError(`tag must be 1-10 lowercase letters or digits, got ${JSON.stringify(input.tag)}`);
  }
  if (!Number.isInteger(input.hosts) || input.hosts < 1 || input.hosts > HOSTS_MAX) {
    throw new PlanError(`hosts must be an integer 1-${HOSTS_MAX}, got ${input.hosts}`);
  }
  for (const [what, mbps] of [
    ['host Mbit/s', input.hostMbps],
    ['origin Mbit/s', input.originMbps],
  ] as const) {
    if (!Number.isFinite(mbps) || mbps < MBPS_MIN || mbps > MBPS_MAX) {
      throw new PlanError(`${what} must be ${MBPS_MIN}-${MBPS_MAX}, got ${mbps}`);
    }
  }
  const mtu = input.mtu ?? MTU_DEFAULT;
  if (!Number.isInteger(mtu) || mtu < MTU_MIN || mtu > MTU_MAX) {
    throw new PlanError(`MTU must be an integer ${MTU_MIN}-${MTU_MAX}, got ${mtu}`);
  }
  const octets = input.subnet.split('.');
  const valid = octets.length === 3 && octets.every((o) => /^\d{1,3}$/.test(o) && Number(o) <= 255);
  if (!valid) throw new PlanError(`subnet must be three octets like 10.77.0, got ${input.subnet}`);
}
