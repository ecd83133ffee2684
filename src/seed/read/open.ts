/** `pull MODEL --seeds SCHEDULER_URL`: the manifest (given, or the catalog's) and an origin over the tier. */

import type { ServiceAccess } from '../../auth/transport.js';
import { WeightcastError } from '../../errors.js';
import { manifestDigest, type Manifest } from '../../manifest/manifest.js';
import { CatalogClient, modelNameOf } from '../catalog/client.js';
import { SeedOrigin } from './seed-origin.js';

export async function openSeedSource(
  model: string,
  schedulerUrl: string,
  manifest: Manifest | undefined,
  signal?: AbortSignal,
  access: ServiceAccess = {},
): Promise<{ origin: SeedOrigin; manifest: Manifest }> {
  const hex = modelNameOf(model);
  if (manifest !== undefined && manifestDigest(manifest) !== `sha256:${hex}`) {
    throw new WeightcastError(
      'MANIFEST_DIGEST_MISMATCH',
      `--manifest is ${manifestDigest(manifest)}, not sha256:${hex}`,
    );
  }
  // The catalog's manifest is checked against the model's name, so it is as good as a local one.
  const checked = manifest ?? (await new CatalogClient(schedulerUrl, access).manifest(hex, { signal }));
  const origin = await SeedOrigin.open(hex, {
    schedulerUrl,
    manifest: checked,
    access,
    ...(signal === undefined ? {} : { signal }),
  });
  return { origin, manifest: checked };
}
