// torch's own bytes for an nn.Parameter, shared by the reader's tests and its fuzz seeds.
#pragma once

#include <string_view>

namespace weightcast::testing {

// data.pkl of `torch.save({'w': torch.nn.Parameter(torch.ones(3))}, f)`, byte for byte as
// torch 2.15 writes it: _rebuild_parameter(_rebuild_tensor_v2(<storage>, 0, (3,), (1,), False,
// OrderedDict()), True, OrderedDict()), the second OrderedDict global a BINGET of the first.
inline constexpr std::string_view kParameterPickle =
    "80027d7100580100000077710163746f7263682e5f7574696c730a5f72656275696c645f706172616d657465720a"
    "710263746f7263682e5f7574696c730a5f72656275696c645f74656e736f725f76320a71032828580700000073"
    "746f72616765710463746f7263680a466c6f617453746f726167650a71055801000000307106580300000063707"
    "571074b03747108514b004b038571094b0185710a8963636f6c6c656374696f6e730a4f726465726564446963"
    "740a710b2952710c74710d52710e88680b2952710f877110527111732e";

}  // namespace weightcast::testing
