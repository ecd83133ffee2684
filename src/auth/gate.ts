/**
 * The service side of cluster credentials: which role a request's `Authorization: Bearer` token
 * grants. Two shared secrets exist: the cluster token (members: agents, pulls; they may read and take
 * part in swarms) and the operator token (put, distribute, catalog node changes, seed piece writes
 * and deletions). The operator token also passes wherever a member's does.
 *
 * Tokens are compared by their SHA-256 digests with crypto.timingSafeEqual, and every configured
 * token is compared on every request, so the time an answer takes does not depend on how much of a
 * guess was right. A service given no token at all is open: every request is an operator's (a
 * loopback demo, or `--insecure`; the listen guard in transport.ts refuses anything else).
 */

import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { WeightcastError } from '../errors.js';

export type Role = 'member' | 'operator';

/** The secrets a service checks callers against (either may be absent). */
export interface ServiceCredentials {
  clusterToken?: string | undefined;
  operatorToken?: string | undefined;
}

/** Longest credential read from a header or a HELLO; anything longer is refused unread. */
export const CREDENTIAL_BYTES_MAX = 1024;

export class Gate {
  private readonly cluster: Buffer | undefined;
  private readonly operator: Buffer | undefined;

  constructor(credentials: ServiceCredentials = {}) {
    this.cluster = digestOf(credentials.clusterToken);
    this.operator = digestOf(credentials.operatorToken);
  }

  /** No token configured: every caller is trusted (loopback demos, `--insecure`). */
  get open(): boolean {
    return this.cluster === undefined && this.operator === undefined;
  }

  /** The role a presented secret grants, or undefined when it matches no configured token. */
  roleOfSecret(secret: Uint8Array | string | undefined): Role | undefined {
    if (this.open) return 'operator';
    if (secret === undefined || secret.length === 0 || secret.length > CREDENTIAL_BYTES_MAX) return undefined;
    const presented = createHash('sha256').update(secret).digest();
    // Both comparisons run whatever the first one found.
    const isOperator = this.operator !== undefined && timingSafeEqual(presented, this.operator);
    const isMember = this.cluster !== undefined && timingSafeEqual(presented, this.cluster);
    if (isOperator) return 'operator';
    return isMember ? 'member' : undefined;
  }

  /** The role of an HTTP request's bearer token, or undefined. */
  roleOf(req: IncomingMessage): Role | undefined {
    return this.roleOfSecret(bearerOf(req.headers.authorization));
  }

  /**
   * The caller's role if it is at least `needed`; else UNAUTHORIZED (no valid credential: 401) or
   * FORBIDDEN (a member on an operator's route: 403). Checked before a request's body is read.
   */
  authorize(req: IncomingMessage, needed: Role): Role {
    const role = this.roleOf(req);
    if (role === undefined) {
      throw new WeightcastError(
        'UNAUTHORIZED',
        'this service needs the cluster credential (Authorization: Bearer; set WEIGHTCAST_CLUSTER_TOKEN or --cluster-token-file)',
      );
    }
    if (needed === 'operator' && role !== 'operator') {
      throw new WeightcastError(
        'FORBIDDEN',
        'only an operator may do this (set WEIGHTCAST_OPERATOR_TOKEN or --operator-token-file)',
      );
    }
    return role;
  }
}

/** The token of an `Authorization: Bearer <token>` header, or undefined. */
export function bearerOf(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const match = /^Bearer +(\S+)\s*$/i.exec(header);
  return match?.[1];
}

function digestOf(token: string | undefined): Buffer | undefined {
  if (token === undefined || token === '') return undefined;
  return createHash('sha256').update(token).digest();
}
