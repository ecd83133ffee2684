export { WeightcastError, isWeightcastError, type ErrorCode } from './errors.js';
