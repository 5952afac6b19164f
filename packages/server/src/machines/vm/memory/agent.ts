import { constants } from 'node:os';
import type { OpenChannel, SpawnerChannel } from '../../../util/spawner.js';
import type { Guest } from './guest.js';
import { runCommand, Signalled } from './shell.js';

const { ENOTTY, ESRCH } = constants.errno;

/** A process the agent started: its table entry. */
interface Proc {
  pid: number;
  label: Buffer | null;
  stdin: Buffer[];
  stdinOpen: boolean;
  stdinWaiters: (() => void)[];
  abort: AbortController;
  /** Frame ids that receive its events (the start's, and attaches'), and the streams each dropped. */
  listeners: Map<number, { channel: Channel; dropped: Set<number> }>;
  done: boolean;
}

interface Channel { send(id: number, type: string, payload?: Buffer): void; closed: boolean }

/**
 * The guest agent of an in-memory VM, in this process: the spawner's frames (util/spawner.ts;
 * native/spawner.c is the real one) answered over channels `open` makes, starting commands in
 * the guest (memory/shell.ts). Starts with argv and stdin ('S'), with options ('E': a stdin
 * pipe, a label; no terminals), attach and detach, kill, discard, input, close stdin, signals
 * and the list of labelled processes. Commands wait while the guest is paused; they end with the
 * VM, and every channel closes then.
 */
export class MemoryAgent {
  private readonly procs = new Map<number, Proc>();
  private readonly channels = new Set<{ close(why: string): void }>();
  private nextPid = 100;
  private ended = false;

  constructor(private readonly guest: Guest, private readonly poweroff: () => void) {}

  readonly open: OpenChannel = (onData, onClose) => {
    let buffered = Buffer.alloc(0);
    const byFrame = new Map<number, Proc>();
    const ch: Channel = {
      closed: false,
      send: (id, type, payload = Buffer.alloc(0)) => {
        if (ch.closed) return;
        const head = Buffer.alloc(9);
        head.writeUInt32LE(id, 0);
        head.write(type, 4, 'latin1');
        head.writeUInt32LE(payload.length, 5);
        const frame = Buffer.concat([head, payload]);
        queueMicrotask(() => { if (!ch.closed) onData(frame); });
      },
    };
    const handle = { close: (why: string) => { if (ch.closed) return; ch.closed = true; this.channels.delete(handle); queueMicrotask(() => onClose(why)); } };
    this.channels.add(handle);
    if (this.ended) handle.close('the connection to the machine\'s agent closed');
    const channel: SpawnerChannel = {
      write: (chunk) => {
        buffered = Buffer.concat([buffered, chunk]);
        while (buffered.length >= 9 && buffered.length >= 9 + buffered.readUInt32LE(5)) {
          const id = buffered.readUInt32LE(0);
          const type = String.fromCharCode(buffered[4]!);
          const payload = Buffer.from(buffered.subarray(9, 9 + buffered.readUInt32LE(5)));
          buffered = buffered.subarray(9 + payload.length);
          queueMicrotask(() => this.frame(ch, byFrame, id, type, payload));
        }
      },
      ref: () => undefined,
      close: () => handle.close('closed'),
    };
    return channel;
  };

  /** The VM ended: every command is killed and every channel closes. */
  end(): void {
    this.ended = true;
    for (const p of this.procs.values()) p.abort.abort(9);
    for (const c of [...this.channels]) c.close('the connection to the machine\'s agent closed');
  }

  private frame(ch: Channel, byFrame: Map<number, Proc>, id: number, type: string, payload: Buffer): void {
    if (ch.closed) return;
    const reply = (errno: number, body = Buffer.alloc(0)) => ch.send(id, 'R', Buffer.concat([i32(errno), body]));
    const target = () => this.procs.get(payload.readUInt32LE(0));
    switch (type) {
      case 'S': {
        const { strings: argv, end } = cstrings(payload, 0);
        const len = payload.readUInt32LE(end);
        this.start(ch, byFrame, id, argv, {}, '/', null, payload.subarray(end + 4, end + 4 + len), false);
        return;
      }
      case 'E': {
        const flags = payload.readUInt32LE(0);
        if (flags & 2) { ch.send(id, 'F', Buffer.concat([u32(ENOTTY), u32(0)])); return; }
        let at = 8;
        const user = cstr(payload, at); at = user.end;
        const cwd = cstr(payload, at); at = cwd.end;
        const env = counted(payload, at); at = env.end;
        const argv = counted(payload, at); at = argv.end;
        const labelLen = payload.readUInt32LE(at);
        const label = labelLen ? Buffer.from(payload.subarray(at + 4, at + 4 + labelLen)) : null;
        const vars = Object.fromEntries(env.strings.map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
        this.start(ch, byFrame, id, argv.strings, vars, cwd.value || '/root', label, Buffer.alloc(0), (flags & 1) !== 0);
        return;
      }
      case 'A': {
        const p = target();
        if (!p || p.done) { ch.send(id, 'F', Buffer.concat([u32(ESRCH), u32(0)])); return; }
        p.listeners.set(id, { channel: ch, dropped: new Set() });
        byFrame.set(id, p);
        ch.send(id, 'P', u32(p.pid));
        return;
      }
      case 'K': byFrame.get(id)?.abort.abort(9); return;
      case 'D': byFrame.get(id)?.listeners.get(id)?.dropped.add(Number(payload.toString())); return;
      case 'U': byFrame.get(id)?.listeners.delete(id); byFrame.delete(id); return;
      case 'I': case 'C': {
        const p = target();
        if (!p || !p.stdinOpen) { reply(p ? constants.errno.EPIPE : ESRCH); return; }
        if (type === 'I') p.stdin.push(Buffer.from(payload.subarray(4)));
        else { p.stdinOpen = false; for (const w of p.stdinWaiters.splice(0)) w(); }
        reply(0);
        return;
      }
      case 'G': {
        const p = target();
        if (!p || p.done) { reply(ESRCH); return; }
        p.abort.abort(payload.readUInt32LE(4));
        reply(0);
        return;
      }
      case 'W': reply(target() ? ENOTTY : ESRCH); return;
      case 'L': {
        const parts = [...this.procs.values()].filter((p) => p.label && !p.done).map((p) => Buffer.concat([u32(p.pid), u32(p.label!.length), p.label!]));
        ch.send(id, 'T', Buffer.concat(parts));
        return;
      }
    }
  }

  private start(ch: Channel, byFrame: Map<number, Proc>, id: number, argv: string[], env: Record<string, string>, cwd: string, label: Buffer | null, stdin: Buffer, pipe: boolean): void {
    const p: Proc = { pid: this.nextPid++, label, stdin: [stdin], stdinOpen: pipe, stdinWaiters: [], abort: new AbortController(), listeners: new Map([[id, { channel: ch, dropped: new Set<number>() }]]), done: false };
    this.procs.set(p.pid, p);
    byFrame.set(id, p);
    ch.send(id, 'P', u32(p.pid));
    const emit = (type: string, payload: Buffer) => {
      for (const [fid, l] of p.listeners) if (!(type === '1' && l.dropped.has(1)) && !(type === '2' && l.dropped.has(2))) l.channel.send(fid, type, payload);
    };
    const stdinAll = async () => {
      while (p.stdinOpen) await new Promise<void>((r) => p.stdinWaiters.push(r));
      return Buffer.concat(p.stdin);
    };
    const finish = (status: number) => {
      p.done = true;
      this.procs.delete(p.pid);
      emit('X', i32(status));
    };
    runCommand(this.guest, argv, {
      env, cwd, stdin: stdinAll, signal: p.abort.signal, poweroff: this.poweroff,
      out: (stream, data) => { if (data.length) emit(stream === 1 ? '1' : '2', data); },
    }).then((code) => finish((code & 0xff) << 8), (e: unknown) => finish(e instanceof Signalled ? e.signo & 0x7f : 9));
  }
}

const u32 = (n: number) => { const b = Buffer.alloc(4); b.writeUInt32LE(n >>> 0); return b; };
const i32 = (n: number) => { const b = Buffer.alloc(4); b.writeInt32LE(n); return b; };

function cstr(b: Buffer, at: number): { value: string; end: number } {
  const nul = b.indexOf(0, at);
  return { value: b.subarray(at, nul).toString(), end: nul + 1 };
}

/** NUL-terminated strings ended by an empty one ('S'). */
function cstrings(b: Buffer, at: number): { strings: string[]; end: number } {
  const strings: string[] = [];
  for (;;) {
    const s = cstr(b, at);
    at = s.end;
    if (s.value === '') return { strings, end: at };
    strings.push(s.value);
  }
}

/** A count, then NUL-terminated strings ('E'). */
function counted(b: Buffer, at: number): { strings: string[]; end: number } {
  const n = b.readUInt32LE(at);
  at += 4;
  const strings: string[] = [];
  for (let i = 0; i < n; i++) { const s = cstr(b, at); strings.push(s.value); at = s.end; }
  return { strings, end: at };
}
