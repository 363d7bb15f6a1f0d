set terminal pngcairo size 1200,480 font ',10'
set output 'bench/quality/results/field/adakv.png'
set multiplot layout 1,2 title 'SmolLM2-135M-Instruct.Q4_1.gguf on the documents of python-howto: 12 windows x 2304 tokens, prompt 2048; error bars = standard error over windows'
set grid
set xlabel 'budget k / prompt length'
set xrange [0:1]
set key top right
set ylabel 'NLL - full-cache NLL (nats/token; full cache: 2.155)'
plot 0 title 'full cache' lw 2 dt 2 lc 'black', 'bench/quality/results/field/adakv_plot.dat' index 0 using 1:8:9 with yerrorlines lt 1 title 'h2o' noenhanced, 'bench/quality/results/field/adakv_plot.dat' index 1 using 1:8:9 with yerrorlines lt 2 title 'h2o+adakv' noenhanced, 'bench/quality/results/field/adakv_plot.dat' index 2 using 1:8:9 with yerrorlines lt 3 title 'h2o+adakv@alpha=0.5' noenhanced, 'bench/quality/results/field/adakv_plot.dat' index 3 using 1:8:9 with yerrorlines lt 4 title 'h2o+mean+adakv' noenhanced, 'bench/quality/results/field/adakv_plot.dat' index 4 using 1:8:9 with yerrorlines lt 5 title 'snapkv+adakv@kernel=15' noenhanced, 'bench/quality/results/field/adakv_plot.dat' index 5 using 1:8:9 with yerrorlines lt 6 title 'keyformer+adakv' noenhanced
set ylabel 'KL(full || policy) (nats)'
set logscale y
plot 'bench/quality/results/field/adakv_plot.dat' index 0 using 1:4:5 with yerrorlines lt 1 title 'h2o' noenhanced, 'bench/quality/results/field/adakv_plot.dat' index 1 using 1:4:5 with yerrorlines lt 2 title 'h2o+adakv' noenhanced, 'bench/quality/results/field/adakv_plot.dat' index 2 using 1:4:5 with yerrorlines lt 3 title 'h2o+adakv@alpha=0.5' noenhanced, 'bench/quality/results/field/adakv_plot.dat' index 3 using 1:4:5 with yerrorlines lt 4 title 'h2o+mean+adakv' noenhanced, 'bench/quality/results/field/adakv_plot.dat' index 4 using 1:4:5 with yerrorlines lt 5 title 'snapkv+adakv@kernel=15' noenhanced, 'bench/quality/results/field/adakv_plot.dat' index 5 using 1:4:5 with yerrorlines lt 6 title 'keyformer+adakv' noenhanced
unset multiplot
