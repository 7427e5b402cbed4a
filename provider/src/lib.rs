//! The Nutanix machine-api provider: API types, the pure plan layer, the actuator, controllers and runtime.
