export { HostAuthorities, type Authority, type AuthoritySet, type HostAuthoritiesOptions } from './authorities.js';
export { TrustLayers, TRUST_DIR, type TrustOverlay } from './overlay.js';
