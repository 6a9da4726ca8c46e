//! The device without hardware: runs the driver-core engine on threads, embedded in-process or as the davinci-mockd daemon.
