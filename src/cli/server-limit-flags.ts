/**
 * The flags every command that runs a server (`scheduler`, `agent`, `serve`) takes for its limits
 * (src/util/server-limits.ts), parsed in one place (declared in definitions/shared.ts). Unset flags
 * keep each server's own defaults.
 */

import { BodyBudget, type ServerLimits } from '../util/server-limits.js';
import { parsePositiveInt } from '../util/units.js';

export interface ServerLimitFlags {
  bodyBufferMb?: string;
  connectionsPerAddress?: string;
  requestTimeoutS?: string;
  idleTimeoutS?: string;
}

const MIB = 1024 * 1024;

export function serverLimitsFromFlags(flags: ServerLimitFlags): Partial<ServerLimits> {
  const limits: Partial<ServerLimits> = {};
  if (flags.bodyBufferMb !== undefined) {
    limits.bodyBudget = new BodyBudget(parsePositiveInt(flags.bodyBufferMb, '--body-buffer-mb') * MIB);
  }
  if (flags.connectionsPerAddress !== undefined) {
    limits.connectionsPerAddressMax = parsePositiveInt(
      flags.connectionsPerAddress,
      '--connections-per-address',
    );
  }
  if (flags.requestTimeoutS !== undefined) {
    limits.requestTimeoutMs = parsePositiveInt(flags.requestTimeoutS, '--request-timeout-s') * 1000;
  }
  if (flags.idleTimeoutS !== undefined) {
    limits.socketIdleMs = parsePositiveInt(flags.idleTimeoutS, '--idle-timeout-s') * 1000;
  }
  return limits;
}
