export * from './errors.js';
export * from './types.js';
export * from './dockerignore.js';
export * from './durations.js';
