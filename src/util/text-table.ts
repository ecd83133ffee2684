/** Plain-text tables for terminal output: no I/O, usable from pure modules. */

/** Aligned columns, two spaces apart; columns listed in `rightAligned` (numbers) align right. */
export function textTable(
  header: readonly string[],
  rows: readonly (readonly string[])[],
  rightAligned: readonly number[],
): string[] {
  const widths = header.map((title, column) =>
    Math.max(title.length, ...rows.map((row) => (row[column] ?? '').length)),
  );
  return [header, ...rows].map((row) =>
    row
      .map((cell, column) => {
        const width = widths[column] ?? 0;
        return rightAligned.includes(column) ? cell.padStart(width) : cell.padEnd(width);
      })
      .join('  ')
      .trimEnd(),
  );
}

/** Names come from files; control characters in them must not reach the terminal. */
export function printable(line: string): string {
  return line.replace(/\p{Cc}/gu, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
