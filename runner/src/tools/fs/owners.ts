import { readFileSync } from 'node:fs';

/** `name:x:id:...` lines of /etc/passwd or /etc/group, by id; the first name of an id wins. */
function namesById(file: string): Map<number, string> {
  const names = new Map<number, string>();
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return names;
  }
  for (const line of text.split('\n')) {
    const [name, , id] = line.split(':');
    const n = Number(id);
    if (name && id !== undefined && id !== '' && Number.isInteger(n) && !names.has(n)) names.set(n, name);
  }
  return names;
}

/** User and group names of the sandbox, read once; an id without a name is its number. */
export class Owners {
  private users: Map<number, string> | undefined;
  private groups: Map<number, string> | undefined;

  constructor(
    private readonly passwd = '/etc/passwd',
    private readonly group = '/etc/group',
  ) {}

  user(uid: number): string {
    this.users ??= namesById(this.passwd);
    return this.users.get(uid) ?? String(uid);
  }

  groupName(gid: number): string {
    this.groups ??= namesById(this.group);
    return this.groups.get(gid) ?? String(gid);
  }
}
