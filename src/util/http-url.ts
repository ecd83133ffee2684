/** Parsing a URL that must be http(s): the one check the CLI's service flags and HTTP redirects share. */

/** `text` (relative to `base`, if given) as an http: or https: URL with a host, or undefined. */
export function httpUrl(text: string, base?: URL): URL | undefined {
  let url: URL;
  try {
    url = new URL(text, base);
  } catch {
    return undefined;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return undefined;
  return url.hostname === '' ? undefined : url;
}
