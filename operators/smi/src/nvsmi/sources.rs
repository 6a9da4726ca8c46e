//! Where each nvidia-smi property comes from on a davinci device (the help texts'
//! descriptions), and `-h`'s text.
#![forbid(unsafe_code)]

/// What `--help-query-*` says of property `name` (its first name).
pub(crate) fn of(switch: &str, name: &str) -> &'static str {
    if switch == "--query-compute-apps" {
        return match name {
            "timestamp" => "When the query was made, \"YYYY/MM/DD HH:MM:SS.msec\" (UTC).",
            "gpu_name" => "The device's model (GET_IDENTITY).",
            "gpu_bus_id" => {
                "The device's PCI address (GET_IDENTITY); [N/A] for a device on no bus."
            }
            "gpu_serial" => "[N/A]: no davinci device reports a serial number.",
            "gpu_uuid" => "The device's UUID with nvidia-smi's GPU- prefix (GET_IDENTITY).",
            "pid" => "Process ID of the client (LIST_CLIENTS).",
            "process_name" => {
                "The process's program as its command line names it, else its comm (LIST_CLIENTS)."
            }
            _ => {
                "Device memory the process holds, in MiB (LIST_CLIENTS, a process's opens summed)."
            }
        };
    }
    match name {
        "timestamp" => "When the query was made, \"YYYY/MM/DD HH:MM:SS.msec\" (UTC).",
        "driver_version" | "kmd_version" => "The driver's version (GET_IDENTITY's driver_version, its version number alone).",
        "count" => "The number of davinci devices found.",
        "name" => "The device's model (GET_IDENTITY).",
        "uuid" => "The device's UUID with nvidia-smi's GPU- prefix (GET_IDENTITY).",
        "pci.bus_id" => "PCI address as \"domain:bus:device.function\" (GET_IDENTITY); [N/A] for a device on no bus.",
        "pci.domain" | "pci.bus" | "pci.device" => "From the PCI address, in hex; [N/A] for a device on no bus.",
        "pci.device_id" => "PCI device and vendor id, in hex (GET_IDENTITY); [N/A] for a device that is not PCI.",
        "index" => "N of /dev/davinciN.",
        "display_mode" | "display_active" => "Disabled: a davinci device has no display.",
        "display_attached" => "No: a davinci device has no display.",
        "persistence_mode" => "Enabled: the driver keeps the device set up with no client open.",
        "accounting.mode" => "Disabled: no process accounting.",
        "pstate" => "P0: a davinci device has one performance state, full speed.",
        "clocks_event_reasons.supported" | "clocks_event_reasons.active" => {
            "Bitmask (nvml.h) of the reasons below that the device reports: idle (busy time), SW power cap and HW (thermal) slowdown (GET_SENSORS)."
        }
        "clocks_event_reasons.gpu_idle" => "Active when the device ran no task while measured (GET_COUNTERS).",
        "clocks_event_reasons.sw_power_cap" => "Active when the device is held to its power limit (GET_SENSORS).",
        "clocks_event_reasons.hw_slowdown" | "clocks_event_reasons.hw_thermal_slowdown" => {
            "Active when the device slows down for its temperature (GET_SENSORS)."
        }
        "memory.total" => "Device memory, in MiB (GET_INFO).",
        "memory.reserved" => "0: the driver reserves none of the device memory it reports.",
        "memory.used" => "Memory held by all clients, in MiB (GET_INFO).",
        "memory.free" => "Memory not held, in MiB (GET_INFO).",
        "compute_mode" => "Exclusive_Process for a device in exclusive mode (one client), Default when shared.",
        "utilization.gpu" => "Percent of the time the device ran tasks, measured over 200 ms (GET_COUNTERS).",
        "temperature.gpu" => "Die temperature, in degrees C (GET_SENSORS).",
        "temperature.memory" => "Device memory (HBM) temperature, in degrees C (GET_SENSORS).",
        "power.management" => "Enabled where the device reports its power (GET_SENSORS).",
        "power.draw" | "power.draw.average" => "Power drawn, averaged since the previous read, in W (GET_SENSORS).",
        "power.limit" | "enforced.power.limit" => "The power cap the device enforces, in W (GET_SENSORS).",
        "pcie.link.gen.current" | "pcie.link.gen.gpucurrent" => "The PCIe link's generation now (GET_SENSORS; a software device's modelled link).",
        "pcie.link.gen.max" | "pcie.link.gen.gpumax" | "pcie.link.gen.hostmax" => "The highest PCIe generation of the device's link (GET_SENSORS).",
        "pcie.link.width.current" => "The PCIe link's lanes now (GET_SENSORS).",
        "pcie.link.width.max" => "The most lanes of the device's link (GET_SENSORS).",
        _ => "[N/A]: no davinci device reports it.",
    }
}

/// `-h`'s text after its first line.
pub(crate) const HELP: &str = "\
davinci-smi answers nvidia-smi's query options for davinci devices, in nvidia-smi's output
shapes, when it is called nvidia-smi (ln -s davinci-smi nvidia-smi) or with davinci-smi
--nvidia-smi as its first argument. Each /dev/davinciN is GPU N. A property no davinci device
reports is [N/A] (N/A in -q), never an invented number; --help-query-gpu says where each
property comes from. Devices are found as davinci-smi finds them (davinci-smi --help), or
--device PATH (repeatable) / --socket-dir DIR.

nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
          --version             Print version information and exit.

  LIST OPTIONS:

    -L,   --list-gpus           Display a list of GPUs connected to the system.

  SUMMARY OPTIONS:

    <no arguments>              Show a summary of GPUs connected to the system.

    [plus any of]

    -i,   --id=                 Target a specific GPU: index, UUID or PCI bus id
                                (comma separated for several).
    -f,   --filename=           Log to a specified file, rather than to stdout.
    -l,   --loop=               Probe until Ctrl+C at specified second interval.

  QUERY OPTIONS:

    -q,   --query               Display GPU info.

    [plus any of]

    -i,   --id=                 Target a specific GPU.
    -f,   --filename=           Log to a specified file, rather than to stdout.
    -x,   --xml-format          Produce XML output.
    -d,   --display=            Display only selected information: MEMORY,
                                    UTILIZATION, TEMPERATURE, POWER, COMPUTE, PIDS,
                                    PERFORMANCE, ACCOUNTING, VOLTAGE (the other names
                                    of nvidia-smi are accepted and show nothing).
    -l,   --loop=               Probe until Ctrl+C at specified second interval.
    -lms, --loop-ms=            Probe until Ctrl+C at specified millisecond interval.

  SELECTIVE QUERY OPTIONS:

    [one of]

    --query-gpu                 Information about GPU.
                                Call --help-query-gpu for more info.
    --query-compute-apps        List of currently active compute processes.
                                Call --help-query-compute-apps for more info.

    [mandatory]

    --format=                   Comma separated list of format options:
                                  csv - comma separated values (MANDATORY)
                                  noheader - skip the first line with column headers
                                  nounits - don't print units for numerical
                                             values

    [plus any of]

    -i,   --id=                 Target a specific GPU.
    -f,   --filename=           Log to a specified file, rather than to stdout.
    -l,   --loop=               Probe until Ctrl+C at specified second interval.
    -lms, --loop-ms=            Probe until Ctrl+C at specified millisecond interval.

Exit status: 0 success, 2 an invalid argument or field, 6 no (such) device; a device that
cannot be reached is named on stderr, with davinci-smi's status (davinci-smi --help).
";
