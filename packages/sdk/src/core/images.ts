import type { BuildEvent, BuildResult, Image, ImageEvent } from '@shellbase/protocol';
import type { Transport } from './transport.js';
import { ndjson } from './ndjson.js';

/** A pull's or an import's progress line. */
export type ImageProgress = Extract<ImageEvent, { type: 'progress' }>;

/** Bytes of a tar archive: in memory (bytes, a Blob), or streamed (Node only: RequestOptions.raw). */
export type TarBody = Uint8Array | Blob | AsyncIterable<Uint8Array>;

export interface BuildOptions {
  /** The build context as a tar archive (Node's SDK also takes a directory: ../images.ts). */
  context: TarBody;
  /** The context the build makes (or moves to the built version). */
  tag: string;
  /** The Dockerfile's path inside the build context (default `Dockerfile`). */
  dockerfile?: string;
  /** Run every step again, even those the cache has. */
  noCache?: boolean;
  /** Values for the Dockerfile's ARGs. */
  buildArgs?: Record<string, string>;
  signal?: AbortSignal;
}

/** `sb.images`: OCI images of the caller's tenant. */
export function imagesApi(sb: Transport) {
  const events = async function* <E extends { type: string }>(res: Response): AsyncGenerator<E> { yield* ndjson<E>(res); };
  return {
    /** Pulls an image from its registry (`insecure`: plain HTTP; loopback registries always are). */
    async pull(ref: string, options: { insecure?: boolean; onProgress?: (p: ImageProgress) => void; signal?: AbortSignal } = {}): Promise<Image> {
      const res = await sb.request('POST', '/v1/images/pull', {
        body: { ref, ...(options.insecure ? { insecure: true } : {}) }, accept: 'application/x-ndjson', signal: options.signal,
      });
      for await (const e of events<ImageEvent>(res)) {
        if (e.type === 'progress') options.onProgress?.(e);
        else if (e.type === 'image') return e.image;
      }
      throw new Error('the pull ended without an image');
    },
    /** Imports the images of an OCI layout or `docker save` archive; `ref` names an archive's only image. */
    async import(archive: TarBody, options: { ref?: string; onProgress?: (p: ImageProgress) => void; signal?: AbortSignal } = {}): Promise<Image[]> {
      const res = await sb.request('POST', '/v1/images/import', {
        raw: archive, query: { ref: options.ref }, accept: 'application/x-ndjson', signal: options.signal,
      });
      for await (const e of events<ImageEvent>(res)) {
        if (e.type === 'progress') options.onProgress?.(e);
        else if (e.type === 'images') return e.images;
      }
      throw new Error('the import ended without images');
    },
    list: async (): Promise<Image[]> => (await sb.json<{ images: Image[] }>('GET', '/v1/images')).images,
    /** Forgets a reference; contexts made of it keep their files. */
    delete: async (ref: string): Promise<void> => { await sb.request('DELETE', `/v1/images/${ref.split('/').map(encodeURIComponent).join('/')}`); },
  };
}

/** Builds a Dockerfile into a context, yielding its steps, RUN output, then `result`. */
export async function* buildStream(sb: Transport, o: BuildOptions): AsyncGenerator<BuildEvent> {
  const res = await sb.request('POST', '/v1/builds', {
    raw: o.context, accept: 'application/x-ndjson', signal: o.signal,
    query: {
      tag: o.tag, dockerfile: o.dockerfile, noCache: o.noCache ? 'true' : undefined,
      buildArg: o.buildArgs ? Object.entries(o.buildArgs).map(([k, v]) => `${k}=${v}`) : undefined,
    },
  });
  yield* ndjson<BuildEvent>(res);
}

/** Builds a Dockerfile into a context and resolves with its steps; `onEvent` sees the stream as it comes. */
export async function build(sb: Transport, o: BuildOptions & { onEvent?: (e: BuildEvent) => void }): Promise<BuildResult> {
  for await (const e of buildStream(sb, o)) {
    o.onEvent?.(e);
    if (e.type === 'result') return { context: e.context, version: e.version, steps: e.steps };
  }
  throw new Error('the build ended without a result');
}
